"""A backend with only the required methods (like pgmq_public): every optional feature
answers invalid_request naming itself, before anything is sent anywhere."""

from __future__ import annotations

from typing import Any

import pytest

from drainpipe import DrainpipeError, Jobs


class MinimalBackend:
    api_version = 1
    name = "minimal"
    leases = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        self.calls.append("send")
        return 1

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.calls.append("read")
        return []

    async def complete(self, job: Any) -> bool:
        return True

    async def fail(self, job: Any, error: str, retry_in: float | None = None) -> Any:
        return "queued"

    async def extend(self, job: Any, lease: float) -> bool:
        return False


@pytest.mark.parametrize(
    ("feature", "call"),
    [
        ("stats", lambda j: j.stats()),
        ("list_dead", lambda j: j.list_dead("q")),
        ("retry_dead", lambda j: j.retry_dead("q")),
        ("replay", lambda j: j.replay("q", 1)),
        ("purge_archive", lambda j: j.purge_archive("q")),
        ("schedule", lambda j: j.schedule("s", "@daily", "q", {})),
        ("unschedule", lambda j: j.unschedule("s")),
        ("list_schedules", lambda j: j.list_schedules()),
        ("unschedule_all", lambda j: j.unschedule_all(tenant="t")),
        (
            "ensure_schedules",
            lambda j: j.ensure_schedules(
                [{"name": "p:a", "cron": "@daily", "queue": "q", "payload": {}}], prefix="p:"
            ),
        ),
    ],
)
async def test_missing_features_are_invalid_requests(feature: str, call: Any) -> None:
    backend = MinimalBackend()
    jobs = Jobs(backend, {"q": dict})
    with pytest.raises(DrainpipeError) as info:
        await call(jobs)
    assert info.value.kind == "invalid_request"
    assert feature in str(info.value) and "minimal" in str(info.value)
    assert backend.calls == []


async def test_schedules_are_a_no_op_to_run_and_jobs_still_work() -> None:
    backend = MinimalBackend()
    jobs = Jobs(backend, {"q": dict})
    assert await jobs.run_schedules() == 0
    assert await jobs.enqueue("q", {"a": 1}) == 1
    assert (await jobs.drain("q", lambda p, j: None)).succeeded == 0  # type: ignore[arg-type,return-value]
    assert backend.calls == ["send", "read"]
