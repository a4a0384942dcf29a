"""Durable steps: record a step, suspend, wait for an event, emit, read steps and results.

Each is one call of a ``drainpipe.*`` function of the jobs baseline (the same on the pgmq and the
table storage), one round trip; every write is fenced by the attempt in the same call.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..db import jsonb
from ..db.statement_shapes import Row, int_array
from ..models import Job, Step

#: (queue, id, attempt, number, name, state, result, code, started_at)
RECORD_STEP = "SELECT drainpipe.record_job_step_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
#: (queue, id, attempt, delay, waiting_for, number, name, started_at)
SUSPEND = "SELECT drainpipe.suspend_job_v1(%s, %s, %s, %s, %s, %s, %s, %s)"
#: (queue, id, attempt, event, key, timeout, number, name, started_at)
WAIT_EVENT = (
    "SELECT outcome, data FROM drainpipe.wait_job_event_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
EMIT = "SELECT drainpipe.emit_event_v1(%s, %s, %s)"
LOAD_STEPS = "SELECT number, name, state, result FROM drainpipe.job_steps_v1(%s, %s)"
WORKFLOW = "SELECT drainpipe.job_workflow_v1(%s, %s)"
RESULT = "SELECT kept, result FROM drainpipe.job_result_v1(%s, %s)"
#: (queue, id, attempt, number, name, child queue, payloads, delay, max_attempts, started_at)
SPAWN = "SELECT outcome, ids FROM drainpipe.spawn_jobs_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
#: (queue, id, attempt, child queue, ids, number, name, started_at)
JOIN = "SELECT drainpipe.join_jobs_v1(%s, %s, %s, %s, %s::bigint[], %s, %s, %s)"
CHILD_OUTCOMES = (
    "SELECT id, state, last_code, kept, result FROM drainpipe.child_outcomes_v1(%s, %s::bigint[])"
)
CANCEL_CHILDREN = "SELECT drainpipe.cancel_job_children_v1(%s, %s)"
PURGE_EVENTS = "SELECT drainpipe.purge_job_events_v1(%s)"

#: the step number under which a handler's return value is kept
RESULT_NUMBER = 0
RESULT_NAME = "$result"


def record_params(
    queue: str,
    job_id: int,
    attempt: int,
    number: int,
    name: str,
    state: str,
    result: Any,
    code: str | None,
    started_at: datetime | None,
) -> tuple[Any, ...]:
    return (queue, job_id, attempt, number, name, state, jsonb(result), code, started_at)


def suspend_params(
    job: Job[Any],
    delay: float,
    waiting_for: str | None,
    number: int | None,
    name: str | None,
    started_at: datetime | None,
) -> tuple[Any, ...]:
    return (job.queue, job.id, job.attempts, delay, waiting_for, number, name, started_at)


def wait_params(
    job: Job[Any],
    event: str,
    key: str,
    timeout: float | None,
    number: int,
    name: str,
    started_at: datetime | None,
) -> tuple[Any, ...]:
    return (job.queue, job.id, job.attempts, event, key, timeout, number, name, started_at)


def parse_wait(rows: list[Row]) -> tuple[str, Any]:
    """(``taken`` | ``timeout`` | ``suspended`` | ``mismatch`` | ``lost``, data)."""
    return (str(rows[0][0]), rows[0][1]) if rows else ("lost", None)


def spawn_params(
    job: Job[Any],
    number: int,
    name: str,
    queue: str,
    payloads: Any,
    delay: float,
    max_attempts: int,
    started_at: datetime | None,
) -> tuple[Any, ...]:
    return (
        job.queue, job.id, job.attempts, number, name, queue, jsonb(list(payloads)),
        delay, max_attempts, started_at,
    )  # fmt: skip


def parse_spawn(rows: list[Row]) -> tuple[str, list[int]]:
    """(``recorded`` | ``exists`` | ``mismatch`` | ``lost``, the children's ids)."""
    if not rows:
        return "lost", []
    return str(rows[0][0]), [int(i) for i in rows[0][1] or ()]


def join_params(
    job: Job[Any],
    queue: str,
    ids: Any,
    number: int,
    name: str,
    started_at: datetime | None,
) -> tuple[Any, ...]:
    return (
        job.queue, job.id, job.attempts, queue, int_array(ids), number, name, started_at,
    )  # fmt: skip


def outcomes_params(queue: str, ids: Any) -> tuple[Any, ...]:
    return (queue, int_array(ids))


def parse_outcomes(rows: list[Row]) -> list[tuple[int, str, str | None, bool, Any]]:
    """(id, state, last code, whether a result was kept, the stored result) per child."""
    return [(int(r[0]), str(r[1]), r[2], bool(r[3]), r[4]) for r in rows]


def parse_text(rows: list[Row]) -> str:
    return str(rows[0][0]) if rows and rows[0][0] is not None else "lost"


def parse_loaded(rows: list[Row]) -> dict[int, tuple[str, str, Any]]:
    """number → (name, state, stored result)."""
    return {int(row[0]): (str(row[1]), str(row[2]), row[3]) for row in rows}


Workflow = tuple[int, int | None, str | None, tuple[Step, ...]]


def parse_workflow(rows: list[Row]) -> Workflow | None:
    """(suspensions, fence of the last suspension, waiting_for, steps) of a job; None when
    it has no workflow."""
    if not rows or rows[0][0] is None:
        return None
    doc = rows[0][0]
    steps = tuple(
        Step(
            number=int(item["number"]),
            name=str(item["name"]),
            state=item["state"],
            started_at=_instant(item.get("started_at")),
            ended_at=_instant(item.get("ended_at")),
            code=item.get("code"),
        )
        for item in doc.get("steps") or ()
    )
    waiting = doc.get("waiting_for")
    fence = doc.get("last_fence")
    return (
        int(doc.get("suspensions") or 0),
        None if fence is None else int(fence),
        None if waiting is None else str(waiting),
        steps,
    )


def _instant(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def parse_result(rows: list[Row]) -> tuple[bool, Any]:
    if not rows:
        return False, None
    return bool(rows[0][0]), rows[0][1]
