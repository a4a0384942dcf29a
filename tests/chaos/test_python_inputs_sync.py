"""The sync twin (``drainpipe.sync``) under the same hypothesis run as the async calls
(tests/chaos/test_python_inputs.py): any value for one argument of a public call gives a
result, a ``DrainpipeError`` of a client's kind, ``ValueError`` or ``TypeError``."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from drainpipe import sync
from tests.chaos.test_python_inputs import ANYTHING, CALLS, QUEUES, Call, check_outcome


def _noop(*args: Any) -> None:
    return None


@dataclasses.dataclass
class SyncCtx:
    conn: psycopg.Connection[Any]
    jobs: sync.Jobs
    job: Any
    idem: sync.Idempotency
    inbox: sync.WebhookInbox


def _hold(c: SyncCtx, *, key: Any, seconds: Any, scope: Any) -> None:
    with sync.lease(c.conn, key, seconds, scope=scope):
        pass


def _sync_calls() -> dict[str, tuple[Call, dict[str, Any]]]:
    """The async table, with what differs in the twin: its constructors, sync handlers and
    ``fn``, no ``deadline`` on drain, and no ``work``/``inbox.process`` (it has neither)."""
    calls = {name: spec for name, spec in CALLS.items() if name not in ("work", "inbox.process")}
    jobs_valid = CALLS["Jobs"][1]
    calls["Jobs"] = (
        lambda c, a: sync.Jobs(c.conn, a["queues"], now=a["now"], scheduler=a["scheduler"]).stats(),
        jobs_valid,
    )
    drain_valid = {k: v for k, v in CALLS["drain"][1].items() if k != "deadline"}
    calls["drain"] = (lambda c, a: c.jobs.drain(**a), {**drain_valid, "handler": _noop})
    calls["Idempotency"] = (
        lambda c, a: sync.Idempotency(c.conn, **a).begin("k", "fp"),
        CALLS["Idempotency"][1],
    )
    calls["WebhookInbox"] = (
        lambda c, a: sync.WebhookInbox(c.conn, **a).list(tenant=None),
        CALLS["WebhookInbox"][1],
    )
    calls["with_lease"] = (
        lambda c, a: sync.with_lease(
            c.conn, a["key"], a["fn"], seconds=a["seconds"], scope=a["scope"]
        ),
        {**CALLS["with_lease"][1], "fn": _noop},
    )
    calls["lease"] = (lambda c, a: _hold(c, **a), CALLS["lease"][1])
    return calls


SYNC_CALLS = _sync_calls()


def _context(url: str) -> SyncCtx:
    conn = psycopg.connect(url, autocommit=True)
    jobs = sync.Jobs(conn, QUEUES)
    jobs.enqueue("work", {"n": 0})
    [job] = jobs.claim("work", lease=30)
    return SyncCtx(
        conn, jobs, job, sync.Idempotency(conn), sync.WebhookInbox(conn, source="billing")
    )


def call_once(ctx: SyncCtx, name: str, arguments: dict[str, Any]) -> BaseException | None:
    call, _ = SYNC_CALLS[name]
    try:
        result = call(ctx, arguments)  # type: ignore[arg-type]
        if asyncio.iscoroutine(result):
            result.close()
            return AssertionError(f"{name} returned a coroutine from the sync twin")
    except Exception as exc:
        return exc
    return None


@seed(19)
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_argument_of_the_sync_twin_gets_a_result_or_a_documented_error(
    jobs_db_url: str, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(SYNC_CALLS)), label="call")
    valid = SYNC_CALLS[name][1]
    broken = data.draw(st.sampled_from(sorted(valid)), label="argument")
    value = data.draw(ANYTHING, label="value")
    ctx = _context(jobs_db_url)
    try:
        error = call_once(ctx, name, {**valid, broken: value})
    finally:
        ctx.conn.close()
    check_outcome(f"sync {name}({broken}={value!r})", error)


@pytest.mark.parametrize("backend", ["table"])
def test_each_sync_call_works_with_its_valid_arguments(fresh_database: Any, backend: str) -> None:
    url = fresh_database(backend)
    for name, (_, valid) in sorted(SYNC_CALLS.items()):
        ctx = _context(url)
        try:
            error = call_once(ctx, name, dict(valid))
            assert error is None, f"{name}: {error!r}"
        finally:
            ctx.conn.close()
