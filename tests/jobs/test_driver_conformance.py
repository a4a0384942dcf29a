"""One conformance suite for the driver interface (docs/reference.md#backends).

The complete drivers (the SQL backend on pgmq and on table storage, PostgREST's
``drainpipe_api`` over the emulated PostgREST on the same databases) run the same
operations with the same answers; every operation of ``Driver`` is called at least once on
each. The reduced backends (``pgmq_public``, the in-memory backend, a custom backend with the
required five only) answer each operation they lack as ``backends.reduced.MISSING`` states:
a refusal naming the feature, before anything is sent, or the stand-in.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import respx

from drainpipe import DrainpipeError, Jobs, QueuePolicy
from drainpipe.backends.driver import OPERATIONS, Driver
from drainpipe.backends.memory import MemoryBackend
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from drainpipe.backends.postgrest import PostgrestBackend
from drainpipe.backends.reduced import MISSING, MissingFeature, ReducedDriver, as_driver
from drainpipe.backends.sql import SqlQueueBackend
from drainpipe.models import Job, JobContext
from tests.jobs.postgrest_emulation import BASE, SERVICE_KEY, postgrest_emulation

QUEUES: dict[str, Any] = {"emails": dict[str, Any], "children": dict[str, Any]}
REQUIRED = ("send", "read", "complete", "fail", "extend")


class Recording:
    """A driver that notes which operations were called (and passes every call on)."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._driver, name)
        if name in OPERATIONS or name in REQUIRED:
            self.called.add(name)
        return attribute


def _protocol_operations() -> set[str]:
    return {
        name
        for name, value in vars(Driver).items()
        if not name.startswith("_") and inspect.isfunction(value)
    } | {
        name
        for base in Driver.__mro__[1:]
        if base.__name__.startswith("Supports") or base.__name__ == "QueueBackend"
        for name, value in vars(base).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }


def test_operations_list_every_method_of_the_interface() -> None:
    assert set(OPERATIONS) | set(REQUIRED) == _protocol_operations()
    assert set(MISSING) == set(OPERATIONS)  # the table states every optional operation


def test_the_sql_and_postgrest_backends_are_complete_drivers() -> None:
    for backend in (
        SqlQueueBackend("postgresql://127.0.0.1/never-connected"),
        PostgrestBackend(BASE, SERVICE_KEY),
    ):
        assert as_driver(backend) is backend
        assert backend.lacks == frozenset()


# -- complete drivers ----------------------------------------------------------------------


@pytest.fixture(params=["pgmq", "table", "pgmq-postgrest", "table-postgrest"])
async def jobs(request: pytest.FixtureRequest, fresh_database: Any) -> AsyncIterator[Jobs]:
    url = str(fresh_database(request.param.removesuffix("-postgrest")))
    if request.param.endswith("-postgrest"):
        async with postgrest_emulation(url), PostgrestBackend(BASE, SERVICE_KEY) as http:
            yield Jobs(http, QUEUES)
        return
    made = Jobs(url, QUEUES)
    yield made
    await made.close()


async def _claim_one(driver: Any, queue: str = "emails") -> Job[Any]:
    [job] = await driver.read(queue, lease=60, batch=1)
    return job  # type: ignore[no-any-return]


async def test_every_operation_answers_alike(jobs: Jobs) -> None:
    driver = Recording(jobs.driver)
    d: Any = driver

    # sending, claiming, leases, settling
    first = await d.send("emails", {"n": 1})
    assert await d.send("emails", {"n": 1}, dedupe_key="k") == await d.send(
        "emails", {"n": 2}, dedupe_key="k"
    )
    assert len(await d.send_many("emails", [{"n": 3}, {"n": 4}])) == 2
    claimed = await d.read("emails", lease=60, batch=2)
    assert claimed[0].id == first
    assert await d.extend(claimed[0], 60) is True
    assert await d.extend_many(claimed, 60) == {job.id for job in claimed}
    assert await d.complete(claimed[0]) is True
    assert await d.complete_many([claimed[1]]) == [True]
    refused, next_batch = await d.complete_and_claim("emails", [], lease=60, batch=1)
    assert refused == [] and len(next_batch) == 1
    assert await d.skip(next_batch[0], "NOTHING_TO_DO") is True
    job = await _claim_one(d)
    assert await d.fail(job, "boom", 0) == "queued"
    job = await _claim_one(d)
    assert await d.fail_coded(job, "boom", None, code="BAD_INPUT", discard=True) == "dead"
    dead_id = job.id
    await d.send("emails", {"n": 5})
    job = await _claim_one(d)
    assert await d.bury(job, "never", "DEADLINE_PASSED") is True
    assert await d.complete(job) is False  # the fence: a settled job stays settled

    # flow control and pause
    flowed = await d.send_flow(
        "emails",
        {"n": 6},
        delay=0,
        max_attempts=5,
        dedupe_key=None,
        dedupe="always",
        key="tenant-1",
        debounce=None,
        throttle=60.0,
    )
    assert (
        await d.send_flow(
            "emails",
            {"n": 7},
            delay=0,
            max_attempts=5,
            dedupe_key=None,
            dedupe="always",
            key="tenant-1",
            debounce=None,
            throttle=60.0,
        )
        == flowed
    )
    assert await d.flow_holds([("emails", flowed)]) == {}
    assert await d.pause("emails") is True
    assert await d.paused(["emails", "children"]) == {"emails"}
    paused, _held = await d.queue_holds(["emails"])
    assert paused == {"emails"}
    assert await d.resume("emails") is True

    # stats, records, dead letters, replays
    stats = await d.stats(["emails"])
    assert stats["emails"].dead == 2
    record = await d.get_record("emails", dead_id)
    assert record is not None and record.state == "dead" and record.history
    page, _after = await d.list_records("emails", state="dead", tenant=None, limit=10, before=None)
    assert {r.id for r in page} >= {dead_id}
    assert [dead.id for dead in await d.list_dead("emails", limit=10, before=None)][-1] == dead_id
    child = await d.replay("emails", dead_id)
    assert child is not None
    assert await d.replay_ruled("emails", dead_id, window=None, replayable=True) == (
        None,
        "JOB_ALREADY_REPLAYED",
    )
    outcomes = await d.retry_dead_ruled(
        "emails", ids=[dead_id], limit=10, window=None, replayable=True
    )
    assert outcomes == [(dead_id, None, "JOB_ALREADY_REPLAYED")]
    assert await d.retry_dead("emails", ids=None, limit=10) == 1  # the buried one
    assert await d.cancel("emails", child) == "cancelled"
    assert await d.cancel("emails", child) == "terminal"
    assert (
        await d.purge_archive(
            "emails", older_than=timedelta(0), dead_older_than=timedelta(0), batch=100
        )
        >= 1
    )

    # policies and encrypted payloads
    await d.ensure_policy("emails", QueuePolicy(retention=3600).as_row("emails"))
    assert await d.apply_retention(min_interval=None) == 0
    live = await d.send("emails", {"n": 8})
    rows = dict(await d.live_payloads("emails", after=0, limit=100))
    assert await d.rewrite_payload("emails", live, rows[live], {"n": 9}) is True
    assert await d.rewrite_payload("emails", live, rows[live], {"n": 10}) is False

    # schedules
    due = datetime.now(UTC) - timedelta(minutes=1)
    await d.schedule(
        "t:nightly", "@daily", "emails", {"n": 0}, time_zone="UTC", next_run=due, tenant="t"
    )
    assert [s.name for s in await d.list_schedules(prefix="t:", tenant=None)] == ["t:nightly"]
    [leased] = await d.due_schedules(lease=60, batch=10)
    assert leased.name == "t:nightly"
    assert await d.advance_schedule("t:nightly", due, due + timedelta(days=1), leased.claim_token)
    assert await d.unschedule("t:nightly") is True
    assert await d.unschedule_tenant("t") == 0

    # durable steps
    parent_id = await d.send("emails", {"n": 11})
    parent = await _claim_ready(d, parent_id)
    assert await d.record_step(parent, 1, "fetch", "done", {"data": 1}) == "recorded"
    assert (await d.load_steps("emails", parent_id))[1][:2] == ("fetch", "done")
    state, ids = await d.spawn(parent, 2, "spawn:fan", "children", [{"c": 1}], 0.0, 5)
    assert state == "recorded" and len(ids) == 1
    assert await d.join(parent, "children", ids, 3, "join") == "suspended"
    [(child_id, child_state, *_rest)] = await d.child_outcomes("children", ids)
    assert (child_id, child_state) == (ids[0], "live")
    assert await d.cancel_children("emails", parent_id) == 1
    waiter_id = await d.send("emails", {"n": 12})
    waiter = await _claim_ready(d, waiter_id)
    outcome, _data = await d.wait_event(waiter, "paid", "order-1", 60.0, 1, "wait")
    assert outcome == "suspended"
    assert await d.emit("paid", "order-1", {"ok": True}) > 0
    assert await d.job_workflow("emails", waiter_id) is not None
    sleeper_id = await d.send("emails", {"n": 13})
    sleeper = await _claim_ready(d, sleeper_id)
    assert await d.suspend(sleeper, 0.0, None) == "suspended"
    assert await d.job_result("emails", sleeper_id) == (False, None)

    assert driver.called == set(OPERATIONS) | set(REQUIRED)


async def _claim_ready(driver: Any, wanted: int) -> Job[Any]:
    """Claim until ``wanted`` comes up (jobs left queued by earlier steps are completed)."""
    for _ in range(20):
        for job in await driver.read("emails", lease=60, batch=10):
            if job.id == wanted:
                return job
            await driver.complete(job)
    raise AssertionError(f"job {wanted} was never claimed")


# -- reduced backends --------------------------------------------------------------------------

_NOW = datetime(2026, 1, 1, tzinfo=UTC)
_JOB: Job[Any] = Job(
    id=1,
    queue="emails",
    payload={},
    context=JobContext(),
    attempts=1,
    max_attempts=5,
    enqueued_at=_NOW,
    visible_until=_NOW,
)

#: one call of each optional operation, with arguments of the right shape
CALLS: dict[str, Callable[[Any], Coroutine[Any, Any, Any]]] = {
    "send_many": lambda d: d.send_many("emails", [{"n": 1}]),
    "complete_many": lambda d: d.complete_many([_JOB]),
    "extend_many": lambda d: d.extend_many([_JOB], 30),
    "complete_and_claim": lambda d: d.complete_and_claim("emails", [_JOB], lease=30, batch=1),
    "skip": lambda d: d.skip(_JOB, "SKIPPED"),
    "fail_coded": lambda d: d.fail_coded(_JOB, "e", None, code="X", discard=False),
    "bury": lambda d: d.bury(_JOB, "e", "X"),
    "send_flow": lambda d: d.send_flow(
        "emails",
        {},
        delay=0,
        max_attempts=5,
        dedupe_key=None,
        dedupe="always",
        key="k",
        debounce=5.0,
        throttle=None,
    ),
    "flow_holds": lambda d: d.flow_holds([("emails", 1)]),
    "queue_holds": lambda d: d.queue_holds(["emails"]),
    "stats": lambda d: d.stats(["emails"]),
    "replay": lambda d: d.replay("emails", 1),
    "replay_ruled": lambda d: d.replay_ruled("emails", 1, window=60.0, replayable=True),
    "retry_dead_ruled": lambda d: d.retry_dead_ruled(
        "emails", ids=None, limit=1, window=None, replayable=True
    ),
    "list_dead": lambda d: d.list_dead("emails", limit=1, before=None),
    "retry_dead": lambda d: d.retry_dead("emails", ids=None, limit=1),
    "purge_archive": lambda d: d.purge_archive(
        "emails", older_than=timedelta(0), dead_older_than=timedelta(0), batch=1
    ),
    "get_record": lambda d: d.get_record("emails", 1),
    "list_records": lambda d: d.list_records(
        "emails", state=None, tenant=None, limit=1, before=None
    ),
    "cancel": lambda d: d.cancel("emails", 1),
    "ensure_policy": lambda d: d.ensure_policy("emails", QueuePolicy().as_row("emails")),
    "apply_retention": lambda d: d.apply_retention(min_interval=None),
    "live_payloads": lambda d: d.live_payloads("emails", after=0, limit=1),
    "rewrite_payload": lambda d: d.rewrite_payload("emails", 1, {}, {}),
    "pause": lambda d: d.pause("emails"),
    "resume": lambda d: d.resume("emails"),
    "paused": lambda d: d.paused(["emails"]),
    "schedule": lambda d: d.schedule(
        "s", "@daily", "emails", {}, time_zone="UTC", next_run=None, tenant=None
    ),
    "unschedule": lambda d: d.unschedule("s"),
    "list_schedules": lambda d: d.list_schedules(prefix=None, tenant=None),
    "unschedule_tenant": lambda d: d.unschedule_tenant("t"),
    "due_schedules": lambda d: d.due_schedules(lease=30, batch=1),
    "advance_schedule": lambda d: d.advance_schedule("s", _NOW, _NOW, None),
    "load_steps": lambda d: d.load_steps("emails", 1),
    "record_step": lambda d: d.record_step(_JOB, 1, "a", "done", None),
    "suspend": lambda d: d.suspend(_JOB, 0.0, None),
    "wait_event": lambda d: d.wait_event(_JOB, "e", "k", None, 1, "w"),
    "emit": lambda d: d.emit("e", "k"),
    "spawn": lambda d: d.spawn(_JOB, 1, "s", "emails", [{}], 0.0, 5),
    "join": lambda d: d.join(_JOB, "emails", [1], 1, "j"),
    "child_outcomes": lambda d: d.child_outcomes("emails", [1]),
    "cancel_children": lambda d: d.cancel_children("emails", 1),
    "job_workflow": lambda d: d.job_workflow("emails", 1),
    "job_result": lambda d: d.job_result("emails", 1),
}


class RequiredOnly:
    """A custom backend with the five required operations, each answering nothing."""

    api_version = 1
    name = "custom-five"
    leases = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send(self, queue: str, payload: Any, **options: Any) -> int:
        self.calls.append("send")
        return len(self.calls)

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Any]:
        self.calls.append("read")
        return []

    async def complete(self, job: Any) -> bool:
        self.calls.append("complete")
        return True

    async def fail(self, job: Any, error: str, retry_in: float | None = None) -> Any:
        self.calls.append("fail")
        return "queued"

    async def extend(self, job: Any, lease: float) -> bool:
        self.calls.append("extend")
        return True


def _refused_features(stated: str) -> list[str] | None:
    """The features a refusal names, from the table's wording; None for a stand-in."""
    if not stated.startswith("refused: invalid_request naming "):
        return None
    return re.findall(r'"([^"]+)"', stated)


def test_every_optional_operation_has_a_call_here() -> None:
    assert set(CALLS) == set(OPERATIONS)


@pytest.fixture(params=["pgmq_public", "memory", "custom-five"])
async def reduced(request: pytest.FixtureRequest) -> AsyncIterator[ReducedDriver]:
    if request.param == "memory":
        yield ReducedDriver(MemoryBackend())
    elif request.param == "custom-five":
        yield ReducedDriver(RequiredOnly())  # type: ignore[arg-type]
    else:
        # nothing may be sent for a refusal: any request fails the test
        with respx.mock(assert_all_called=False) as router:
            router.route().respond(500)
            async with PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as made:
                yield ReducedDriver(made)
            assert not router.calls


async def test_a_reduced_backend_refuses_what_it_lacks_as_the_table_states(
    reduced: ReducedDriver,
) -> None:
    assert as_driver(reduced.backend).lacks == reduced.lacks
    assert reduced.lacks, "a reduced backend lacks something"
    for operation in sorted(reduced.lacks):
        features = _refused_features(MISSING[operation])
        if features is None:
            continue  # a stand-in: see the next test
        with pytest.raises(MissingFeature) as refused:
            await CALLS[operation](reduced)
        assert refused.value.kind == "invalid_request" and refused.value.code is None
        assert refused.value.message.endswith(
            f"needs a SQL connection; the {reduced.name} backend does not support it"
        )
        assert any(refused.value.message.startswith(f"{f} needs") for f in features)


async def test_stand_ins_answer_from_the_required_operations() -> None:
    backend = RequiredOnly()
    driver = ReducedDriver(backend)  # type: ignore[arg-type]
    assert driver.lacks == frozenset(OPERATIONS)
    assert await driver.send_many("emails", [{}, {}]) == [1, 2]
    assert await driver.complete_many([_JOB]) == [True]
    assert await driver.extend_many([_JOB], 30) == {1}
    assert await driver.complete_and_claim("emails", [_JOB], lease=30, batch=1) == ([], [])
    assert backend.calls[-2:] == ["read", "complete"]  # claimed first: a failed claim settles none
    assert await driver.skip(_JOB, "SKIPPED") is True
    assert await driver.fail_coded(_JOB, "e", None, code="X", discard=True) == "queued"
    assert await driver.bury(_JOB, "e", "X") is True  # archived: its only terminal state
    assert await driver.flow_holds([("emails", 1)]) == {}
    assert await driver.queue_holds(["emails"]) == (set(), {})
    assert await driver.paused(["emails"]) == set()
    assert await driver.due_schedules(lease=30, batch=1) == []
    assert await driver.apply_retention(min_interval=3600) is None
    assert await driver.job_workflow("emails", 1) is None
    with pytest.raises(DrainpipeError, match=r"^replay rules needs"):
        await driver.replay_ruled("emails", 1, window=60.0, replayable=True)
    with pytest.raises(DrainpipeError, match=r"^replay needs"):
        await driver.replay_ruled("emails", 1, window=None, replayable=True)


async def test_a_backend_that_has_an_operation_answers_it_itself() -> None:
    memory = MemoryBackend()
    driver = ReducedDriver(memory)
    assert "stats" not in driver.lacks and "send_flow" in driver.lacks
    assert driver.stats.__self__ is memory  # type: ignore[attr-defined]
    assert driver.send.__self__ is memory  # type: ignore[attr-defined]


async def test_schedule_runs_need_both_halves() -> None:
    class LeasesOnly(RequiredOnly):
        async def due_schedules(self, *, lease: float, batch: int) -> list[Any]:
            raise AssertionError("never asked: it could not advance what it leased")

    driver = ReducedDriver(LeasesOnly())  # type: ignore[arg-type]
    assert {"due_schedules", "advance_schedule"} <= driver.lacks
    assert await driver.due_schedules(lease=30, batch=1) == []
