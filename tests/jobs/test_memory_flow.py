"""Flow control on the in-memory backend (docs/flow-control.md#testing-without-postgres):
refused by name rather than imitated, and ``without_flow_control`` for the rest of an
application's policies. No database fixture here."""

from __future__ import annotations

from typing import Any

import pytest

from drainpipe import DrainpipeError, Jobs, QueuePolicy, Rate
from drainpipe.testing import MemoryBackend, without_flow_control

QUEUES: dict[str, Any] = {"llm": dict[str, Any], "ledger": dict[str, Any]}


def refusal(exc: pytest.ExceptionInfo[DrainpipeError]) -> str:
    assert exc.value.kind == "invalid_request"
    assert "memory backend does not enforce it" in str(exc.value)
    return str(exc.value)


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        (QueuePolicy(concurrency=20), ["concurrency"]),
        (QueuePolicy(key_concurrency=2), ["key_concurrency"]),
        (QueuePolicy(rate=Rate(600, per=60)), ["rate"]),
        (QueuePolicy(key_rate=Rate(60, per=60), ordered=True), ["key_rate", "ordered"]),
        (
            QueuePolicy(concurrency=1, key_concurrency=1, rate=Rate(1, per=1)),
            ["concurrency", "key_concurrency", "rate"],
        ),
    ],
)
async def test_a_policy_with_flow_limits_is_refused_naming_them(
    policy: QueuePolicy, named: list[str]
) -> None:
    jobs = Jobs(MemoryBackend(), QUEUES, policies={"llm": policy})
    with pytest.raises(DrainpipeError) as exc:
        await jobs.ensure_policies()
    message = refusal(exc)
    assert f"sets {', '.join(named)}:" in message and "'llm'" in message


async def test_a_priority_is_refused_and_nothing_is_stored() -> None:
    backend = MemoryBackend()
    jobs = Jobs(backend, QUEUES)
    with pytest.raises(DrainpipeError) as one:
        await jobs.enqueue("llm", {"n": 1}, priority=10)
    assert "priority=10" in refusal(one)
    with pytest.raises(DrainpipeError) as many:
        await jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}], priority=-5)
    assert "priority=-5" in refusal(many)
    assert (await jobs.stats(["llm"]))["llm"].ready == 0


async def test_debounce_and_throttle_are_refused_as_missing_features() -> None:
    jobs = Jobs(MemoryBackend(), QUEUES)
    for option in ({"debounce": 5}, {"throttle": 5}):
        with pytest.raises(DrainpipeError) as exc:
            await jobs.enqueue("llm", {"n": 1}, key="tenant-1", **option)
        assert exc.value.kind == "invalid_request"
        assert f"{next(iter(option))} needs a SQL connection" in str(exc.value)


async def test_keys_and_priority_zero_are_kept_as_without_limits() -> None:
    jobs = Jobs(MemoryBackend(), QUEUES)
    first = await jobs.enqueue("llm", {"n": 1}, key="tenant-1", priority=0)
    second = await jobs.enqueue("llm", {"n": 2}, key="tenant-1")
    claimed = await jobs.claim("llm", batch=5)
    assert [job.id for job in claimed] == [first, second]  # both: nothing limits a key here


async def test_without_flow_control_keeps_every_other_field() -> None:
    policies = {
        "llm": QueuePolicy(
            max_pending=2, lease=10.0, concurrency=20, key_concurrency=2, rate=Rate(600, per=60)
        ),
        "ledger": QueuePolicy(ordered=True, key_rate=Rate(1, per=1), max_attempts=3),
    }
    stripped = without_flow_control(policies)
    assert stripped == {
        "llm": QueuePolicy(max_pending=2, lease=10.0),
        "ledger": QueuePolicy(max_attempts=3),
    }
    assert policies["llm"].concurrency == 20  # the application's own policies are unchanged
    jobs = Jobs(MemoryBackend(), QUEUES, policies=stripped)
    assert await jobs.ensure_policies() == 2
    await jobs.enqueue_many("llm", [{"n": 1}, {"n": 2}])
    with pytest.raises(DrainpipeError) as full:  # the pending cap still holds
        await jobs.enqueue("llm", {"n": 3})
    assert full.value.kind == "rate_limited"  # queue_full's kind
