"""Every public call, given any Python value for one of its arguments (the others valid),
returns a result or raises what the contract documents: a ``DrainpipeError`` of a client's
kind (4xx), or ``ValueError``/``TypeError`` for a wrong argument of a constructor or
option. Never ``AttributeError``, ``KeyError``, ``OverflowError``, a ``psycopg`` error, a
``RecursionError`` or a 5xx kind. Both backends; hypothesis with a fixed seed."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

import drainpipe
from drainpipe import DrainpipeError, Idempotency, Job, Jobs, WebhookInbox
from tests.conftest import connect

QUEUES: dict[str, Any] = {"work": dict[str, Any]}
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.text(
        alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2
    ),
    st.sampled_from(
        ["", "\x00", "x" * 3000, "q\n", "localtime", "* * * * *", "0 0 30 2 *", "@daily"]
    ),
    st.binary(max_size=8),
    JSONISH,
    st.lists(st.text(max_size=4), max_size=3).map(tuple),
    st.timedeltas(min_value=timedelta(days=-(10**4)), max_value=timedelta(days=10**4)),
    st.datetimes(),  # naive
    st.datetimes(timezones=st.just(UTC)),
    st.sampled_from([object(), print, int, asyncio.Event(), {"tenat": "x"}, {"actor": 1}]),
)


async def _noop(*args: Any) -> None:
    return None


@dataclasses.dataclass
class Ctx:
    conn: psycopg.AsyncConnection[Any]
    jobs: Jobs
    job: Job[Any]
    idem: Idempotency
    inbox: WebhookInbox


def _stopped() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


Call = Callable[[Ctx, dict[str, Any]], Any]
# name -> (the call, its valid arguments); each example breaks one argument
CALLS: dict[str, tuple[Call, dict[str, Any]]] = {
    "Jobs": (
        lambda c, a: Jobs(c.conn, a["queues"], now=a["now"], scheduler=a["scheduler"]).stats(),
        {"queues": QUEUES, "now": None, "scheduler": "drain"},
    ),
    "enqueue": (
        lambda c, a: c.jobs.enqueue(**a),
        {
            "queue": "work",
            "payload": {"n": 1},
            "delay": None,
            "run_at": None,
            "max_attempts": 5,
            "dedupe_key": None,
            "dedupe": "always",
            "context": None,
        },
    ),
    "enqueue_many": (
        lambda c, a: c.jobs.enqueue_many(**a),
        {
            "queue": "work",
            "payloads": [{"n": 1}],
            "delay": None,
            "run_at": None,
            "max_attempts": 5,
            "context": None,
        },
    ),
    "claim": (lambda c, a: c.jobs.claim(**a), {"queue": "work", "batch": 1, "lease": 0.01}),
    "complete": (lambda c, a: c.jobs.complete(a["job"] or c.job), {"job": None}),
    "fail": (
        lambda c, a: c.jobs.fail(a["job"] or c.job, a["error"], retry_in=a["retry_in"]),
        {"job": None, "error": "boom", "retry_in": None},
    ),
    "extend": (
        lambda c, a: c.jobs.extend(a["job"] or c.job, a["lease"]),
        {"job": None, "lease": 1},
    ),
    "drain": (
        lambda c, a: c.jobs.drain(**a),
        {
            "queue": "work",
            "handler": _noop,
            "concurrency": 1,
            "batch": 1,
            "lease": 1,
            "budget": 0.2,
            "on_error": None,
            "all_tenants": False,
            "deadline": None,
            "heartbeat_every": None,
        },
    ),
    "work": (
        lambda c, a: c.jobs.work(**a),
        {
            "queue": "work",
            "handler": _noop,
            "concurrency": 1,
            "batch": 1,
            "lease": 1,
            "poll_interval": 0.01,
            "max_poll_interval": 0.1,
            "stop": _stopped(),
            "on_error": None,
            "all_tenants": False,
            "heartbeat_every": None,
            "max_outage": 1,
        },
    ),
    "stats": (lambda c, a: c.jobs.stats(a["queues"]), {"queues": None}),
    "list_dead": (
        lambda c, a: c.jobs.list_dead(**a),
        {"queue": "work", "limit": 10, "cursor": None},
    ),
    "retry_dead": (
        lambda c, a: c.jobs.retry_dead(**a),
        {"queue": "work", "ids": None, "limit": 10},
    ),
    "replay": (lambda c, a: c.jobs.replay(**a), {"queue": "work", "job_id": 1}),
    "purge_archive": (
        lambda c, a: c.jobs.purge_archive(**a),
        {"queue": "work", "older_than": 60, "dead_older_than": 60, "batch": 10},
    ),
    "schedule": (
        lambda c, a: c.jobs.schedule(**a),
        {
            "name": "s",
            "cron": "@daily",
            "queue": "work",
            "payload": {},
            "time_zone": "UTC",
            "tenant": None,
            "context": None,
        },
    ),
    "unschedule": (lambda c, a: c.jobs.unschedule(**a), {"name": "s"}),
    "list_schedules": (lambda c, a: c.jobs.list_schedules(**a), {"prefix": None, "tenant": None}),
    "unschedule_all": (lambda c, a: c.jobs.unschedule_all(**a), {"tenant": "t"}),
    "ensure_schedules": (
        lambda c, a: c.jobs.ensure_schedules(
            a["definitions"], prefix=a["prefix"], tenant=a["tenant"]
        ),
        {
            "definitions": [drainpipe.ScheduleDef("p-a", "@hourly", "work", {})],
            "prefix": "p-",
            "tenant": None,
        },
    ),
    "run_schedules": (lambda c, a: c.jobs.run_schedules(**a), {"lease": 60, "batch": 10}),
    "next_cron_run": (
        lambda c, a: drainpipe.next_cron_run(**a),
        {"expr": "0 9 * * *", "time_zone": "Europe/Amsterdam", "after": None},
    ),
    "assert_cron": (lambda c, a: drainpipe.assert_cron(**a), {"expr": "*/5 * * * *"}),
    "Idempotency": (
        lambda c, a: Idempotency(c.conn, **a).begin("k", "fp"),
        {
            "ttl": 60,
            "lock": 10,
            "required": False,
            "header": "Idempotency-Key",
            "scope": None,
            "max_body_bytes": 1000,
            "now": None,
        },
    ),
    "idempotency.begin": (
        lambda c, a: c.idem.begin(**a),
        {"key": "k", "fingerprint": "fp", "scope": ""},
    ),
    "idempotency.complete": (
        lambda c, a: c.idem.complete(**a),
        {
            "key": "k",
            "holder": "h",
            "status": 201,
            "body": b"{}",
            "scope": "",
            "content_type": "application/json",
        },
    ),
    "idempotency.release": (
        lambda c, a: c.idem.release(**a),
        {"key": "k", "holder": "h", "scope": ""},
    ),
    "idempotency.purge": (lambda c, a: c.idem.purge(**a), {"batch": 10}),
    "with_lease": (
        lambda c, a: drainpipe.with_lease(
            c.conn, a["key"], a["fn"], seconds=a["seconds"], scope=a["scope"]
        ),
        {"key": "k", "fn": _noop, "seconds": 5, "scope": ""},
    ),
    "lease": (lambda c, a: _hold(c, **a), {"key": "k", "seconds": 5, "scope": ""}),
    "WebhookInbox": (
        lambda c, a: WebhookInbox(c.conn, **a).list(tenant=None),
        {
            "source": "billing",
            "secrets": None,
            "type_of": None,
            "tenant_of": None,
            "keep_headers": (),
            "max_attempts": 8,
            "max_body_bytes": 1000,
            "worker": None,
            "now": None,
        },
    ),
    "inbox.store": (
        lambda c, a: c.inbox.store(**a),
        {"id": "m1", "payload": {"a": 1}, "type": None, "tenant": None, "headers": None},
    ),
    "inbox.process": (
        lambda c, a: c.inbox.process(**a),
        {
            "handler": _noop,
            "batch": 10,
            "lease": 5,
            "budget": 0.2,
            "deadline": None,
            "on_error": None,
            "heartbeat_every": None,
        },
    ),
    "inbox.list": (lambda c, a: c.inbox.list(**a), {"tenant": None, "status": None, "limit": 10}),
    "inbox.purge": (
        lambda c, a: c.inbox.purge(**a),
        {"older_than": 60, "include_dead": False, "tenant": None, "batch": 10},
    ),
}


async def _hold(c: Ctx, *, key: Any, seconds: Any, scope: Any) -> None:
    async with drainpipe.lease(c.conn, key, seconds, scope=scope):
        pass


def check_outcome(name: str, error: BaseException | None) -> None:
    if error is None or isinstance(error, ValueError | TypeError):
        return
    assert isinstance(error, DrainpipeError), f"{name}: {type(error).__name__}: {error}"
    assert 400 <= error.status < 500 and error.kind != "unexpected", f"{name}: {error!r}"


async def call_once(ctx: Ctx, name: str, arguments: dict[str, Any]) -> BaseException | None:
    call, _ = CALLS[name]
    try:
        result = call(ctx, arguments)
        if isinstance(result, Awaitable):
            await asyncio.wait_for(result, timeout=10)
    except TimeoutError as exc:
        return AssertionError(f"{name} did not return within 10 s: {exc!r}")
    except Exception as exc:
        return exc
    return None


@seed(19)
@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_argument_gets_a_result_or_a_documented_error(
    jobs_db_url: str, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(CALLS)), label="call")
    valid = CALLS[name][1]
    broken = data.draw(st.sampled_from(sorted(valid)), label="argument")
    value = data.draw(ANYTHING, label="value")
    arguments = {**valid, broken: value}
    # work's stop: None or an Event nobody sets means "run for ever", as documented
    assume(
        not (
            name == "work"
            and broken == "stop"
            and (value is None or isinstance(value, asyncio.Event))
        )
    )

    async def attempt() -> BaseException | None:
        conn = await connect(jobs_db_url)
        try:
            jobs = Jobs(conn, QUEUES)
            await jobs.enqueue("work", {"n": 0})
            claimed = await jobs.claim("work", lease=30)
            ctx = Ctx(
                conn, jobs, claimed[0], Idempotency(conn), WebhookInbox(conn, source="billing")
            )
            return await call_once(ctx, name, arguments)
        finally:
            await conn.close()

    check_outcome(f"{name}({broken}={value!r})", asyncio.run(attempt()))


async def _context(url: str) -> Ctx:
    conn = await connect(url)
    jobs = Jobs(conn, QUEUES)
    await jobs.enqueue("work", {"n": 0})
    [job] = await jobs.claim("work", lease=30)
    return Ctx(conn, jobs, job, Idempotency(conn), WebhookInbox(conn, source="billing"))


async def test_each_call_works_with_its_valid_arguments(jobs_db_url: str) -> None:
    # the base every example breaks one argument of: it must be a working call
    for name, (_, valid) in sorted(CALLS.items()):
        ctx = await _context(jobs_db_url)
        try:
            error = await call_once(ctx, name, dict(valid))
            assert error is None, f"{name}: {error!r}"
        finally:
            await ctx.conn.close()


FOUND = [
    # what this suite's first runs found: each raised something else before
    ("claim", "lease", 10**30, "validation"),  # OverflowError (every duration argument)
    ("work", "poll_interval", 10**30, "validation"),  # OverflowError
    ("purge_archive", "older_than", 1e300, "validation"),  # OverflowError (timedelta)
    ("idempotency.purge", "batch", 2**31, "validation"),  # NOT_INSTALLED (bigint argument)
    ("inbox.store", "headers", "x-a: 1", "validation"),  # AttributeError
    ("work", "stop", True, TypeError),  # AttributeError: 'bool' object has no attribute 'is_set'
    ("drain", "lease", lambda: None, "validation"),  # unexpected: float() argument ...
]


@pytest.mark.parametrize(("name", "argument", "value", "expected"), FOUND)
async def test_what_the_fuzz_found_is_refused_as_documented(
    db_url: str, name: str, argument: str, value: Any, expected: Any
) -> None:
    ctx = await _context(db_url)
    try:
        error = await call_once(ctx, name, {**CALLS[name][1], argument: value})
    finally:
        await ctx.conn.close()
    if isinstance(expected, str):
        assert isinstance(error, DrainpipeError) and error.kind == expected, repr(error)
    else:
        assert isinstance(error, expected), repr(error)


async def test_unschedule_names_its_argument_in_the_issue_path(db_url: str) -> None:
    # the path held the message's label ("The schedule name") instead of the argument
    ctx = await _context(db_url)
    try:
        error = await call_once(ctx, "unschedule", {"name": "a\ud800"})
    finally:
        await ctx.conn.close()
    assert isinstance(error, DrainpipeError) and error.issues is not None
    assert error.issues[0]["path"] == ["name"]
