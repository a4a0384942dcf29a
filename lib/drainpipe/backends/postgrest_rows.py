"""The JSON results of the ``drainpipe_api`` functions read into drainpipe's models.

Every reader checks the shape it gets: an answer that is not what the function returns (a
gateway's page, another API's result) is an ``unexpected`` error naming the function, never
a wrong value taken at face value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..codes import valid_code
from ..context import ENVELOPE_KEY, unwrap_payload
from ..errors import DrainpipeError
from ..models import (
    DeadJob,
    DueSchedule,
    FailOutcome,
    Job,
    JobContext,
    JobRecord,
    Position,
    QueueStats,
    ScheduleInfo,
    claimed_job,
    held_counts,
)
from .record_statements import parse_record

NO_CONTEXT = JobContext()


def malformed(schema: str, fn: str, what: str, data: Any) -> DrainpipeError:
    shown = repr(data)
    if len(shown) > 200:
        shown = shown[:200] + "…"
    return DrainpipeError("unexpected", f"{schema}.{fn}: expected {what}, got {shown}")


def _int(value: Any) -> int | None:
    """A JSON integer, or its digits as a string (bigints past 2**53 through some gateways)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _instant(value: Any) -> datetime | None:
    """A timestamptz from JSON; a naive one is read as UTC."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def job_id(schema: str, fn: str, data: Any) -> int:
    found = _int(data)
    if found is None:
        raise malformed(schema, fn, "a job id", data)
    return found


def job_ids(schema: str, fn: str, data: Any, expected: int) -> list[int]:
    if not isinstance(data, list) or len(data) != expected:
        raise malformed(schema, fn, f"{expected} job ids", data)
    return [job_id(schema, fn, value) for value in data]


def _replay_code(value: Any) -> str | None:
    if value is None or valid_code(value):
        return value  # type: ignore[no-any-return]
    raise ValueError(value)


def replay_outcome(schema: str, fn: str, data: Any) -> tuple[int | None, str | None]:
    """replay_v3's ``{"id", "code"}``: the new id, or None and why not."""
    if isinstance(data, dict) and set(data) == {"id", "code"}:
        found = None if data["id"] is None else _int(data["id"])
        try:
            code = _replay_code(data["code"])
        except ValueError:
            code, found = None, None
        if (found is None) != (code is None):
            return found, code
    raise malformed(schema, fn, '{"id", "code"}', data)


def replay_outcomes(schema: str, fn: str, data: Any) -> list[tuple[int, int | None, str | None]]:
    """retry_dead_v2's ``[[job id, new id, code], ...]``."""
    if not isinstance(data, list):
        raise malformed(schema, fn, "a list of [job id, new id, code]", data)
    found: list[tuple[int, int | None, str | None]] = []
    for entry in data:
        if not isinstance(entry, list) or len(entry) != 3:
            raise malformed(schema, fn, "[job id, new id, code]", entry)
        new_id, code = replay_outcome(schema, fn, {"id": entry[1], "code": entry[2]})
        found.append((job_id(schema, fn, entry[0]), new_id, code))
    return found


def id_set(schema: str, fn: str, data: Any) -> set[int]:
    if not isinstance(data, list):
        raise malformed(schema, fn, "a list of job ids", data)
    return {job_id(schema, fn, value) for value in data}


def flag(schema: str, fn: str, data: Any) -> bool:
    if not isinstance(data, bool):
        raise malformed(schema, fn, "true or false", data)
    return data


def names(schema: str, fn: str, data: Any) -> set[str]:
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise malformed(schema, fn, "a list of names", data)
    return set(data)


def count(schema: str, fn: str, data: Any) -> int:
    found = _int(data)
    if found is None:
        raise malformed(schema, fn, "a count", data)
    return found


def fail_outcome(schema: str, data: Any, fn: str = "fail_v1") -> FailOutcome | None:
    if data is None or data == "queued" or data == "dead":
        outcome: FailOutcome | None = data
        return outcome
    raise malformed(schema, fn, '"queued", "dead" or null', data)


def live_payloads(schema: str, data: Any) -> list[tuple[int, Any]]:
    """``live_payloads_v1``: ``[{id, payload}]`` as stored (context envelope included)."""
    fn = "live_payloads_v1"
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise malformed(schema, fn, "a list of {id, payload}", data)
    return [(job_id(schema, fn, item.get("id")), item.get("payload")) for item in data]


def claimed(schema: str, queue: str, data: Any, fn: str = "claim_v1") -> list[Job[Any]]:
    """``claim_v1``'s rows (or ``fn``'s, which has the same) ``[id, attempts, enqueued_at,
    visible_until, payload, max_attempts, last_error]`` → Jobs (payloads not validated yet)."""
    if not isinstance(data, list):
        raise malformed(schema, fn, "a list of jobs", data)
    jobs = []
    for row in data:
        try:
            job_id_, attempts, enqueued_at, visible_until, stored, max_attempts, last_error = row
            if isinstance(stored, dict) and ENVELOPE_KEY in stored:
                payload, context = unwrap_payload(stored)
            else:
                payload, context = stored, NO_CONTEXT
            jobs.append(
                claimed_job(
                    int(job_id_),
                    queue,
                    payload,
                    context,
                    int(attempts),
                    int(max_attempts),
                    datetime.fromisoformat(enqueued_at),
                    datetime.fromisoformat(visible_until),
                    last_error,
                )
            )
        except (TypeError, ValueError) as exc:
            raise malformed(schema, fn, f"job rows ({exc})", row) from None
    return jobs


def queue_holds(schema: str, data: Any) -> tuple[set[str], dict[str, dict[str, int]]]:
    """``queue_holds_v1``'s ``{"paused": [queue, ...], "held": {queue: {reason: n}}}``."""
    try:
        paused = data["paused"]
        held = {queue: held_counts(counts) for queue, counts in data["held"].items()}
        if not (isinstance(paused, list) and all(isinstance(q, str) for q in paused)):
            raise TypeError("paused")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise malformed(
            schema, "queue_holds_v1", '{"paused": [...], "held": {...}}', data
        ) from None
    return set(paused), {queue: counts for queue, counts in held.items() if counts}


def stats(schema: str, data: Any) -> dict[str, QueueStats]:
    if not isinstance(data, dict):
        raise malformed(schema, "stats_v4", "counts by queue", data)
    try:
        return {
            queue: QueueStats(
                ready=int(row["ready"]),
                in_flight=int(row["in_flight"]),
                delayed=int(row["delayed"]),
                dead=int(row["dead"]),
                oldest_age_seconds=(
                    None if row["oldest_age_seconds"] is None else float(row["oldest_age_seconds"])
                ),
                succeeded=int(row.get("succeeded", 0)),
                cancelled=int(row.get("cancelled", 0)),
                paused=bool(row.get("paused", False)),
                held=held_counts(row.get("held")),
            )
            for queue, row in data.items()
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise malformed(schema, "stats_v4", f"counts by queue ({exc})", data) from None


def dead(schema: str, queue: str, data: Any) -> list[DeadJob]:
    if not isinstance(data, list):
        raise malformed(schema, "list_dead_v1", "a list of dead letters", data)
    letters = []
    for row in data:
        try:
            message = row["message"] if isinstance(row["message"], dict) else {}
            payload, context = unwrap_payload(message.get("payload"))
            letters.append(
                DeadJob(
                    id=int(row["id"]),
                    queue=queue,
                    payload=payload,
                    context=context,
                    attempts=int(row["attempts"]),
                    max_attempts=int(message.get("max_attempts") or 5),
                    last_error=message.get("last_error"),
                    enqueued_at=_instant(row["enqueued_at"]),  # type: ignore[arg-type]
                    died_at=_instant(row["died_at"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed(schema, "list_dead_v1", f"dead letters ({exc})", row) from None
    return letters


def schedules(schema: str, data: Any) -> list[ScheduleInfo]:
    if not isinstance(data, list):
        raise malformed(schema, "list_schedules_v1", "a list of schedules", data)
    found = []
    for row in data:
        try:
            found.append(
                ScheduleInfo(
                    row["name"],
                    row["cron"],
                    row["time_zone"],
                    row["queue"],
                    row["tenant"],
                    _instant(row["next_run"]),
                    _instant(row["last_run"]),
                    _instant(row["leased_until"]),
                    _instant(row["created_at"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed(schema, "list_schedules_v1", f"schedules ({exc})", row) from None
    return found


def due_schedules(schema: str, data: Any) -> list[DueSchedule]:
    if not isinstance(data, list):
        raise malformed(schema, "claim_due_schedules_v1", "a list of schedules", data)
    found = []
    for row in data:
        try:
            found.append(
                DueSchedule(
                    row["name"],
                    row["cron"],
                    row["time_zone"],
                    row["queue"],
                    row["payload"],
                    _instant(row["next_run"]),
                    _instant(row["first_after"]),
                    row["claim_token"],
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed(schema, "claim_due_schedules_v1", f"schedules ({exc})", row) from None
    return found


_RECORD_FIELDS = (
    "id", "queue", "state", "attempts", "max_attempts", "deadline", "tenant", "dedupe_key",
    "enqueued_at", "eligible_at", "started_at", "finished_at", "last_code", "parent_id",
    "replayed_by", "history",
)  # fmt: skip
_RECORD_TIMES = frozenset(("deadline", "enqueued_at", "eligible_at", "started_at", "finished_at"))


def record(schema: str, fn: str, data: Any) -> JobRecord:
    """A ``job_record_v1`` object → JobRecord (read as the SQL backend reads its row)."""
    if not isinstance(data, dict):
        raise malformed(schema, fn, "a job record", data)
    try:
        row = tuple(
            _instant(data[name]) if name in _RECORD_TIMES else data[name] for name in _RECORD_FIELDS
        )
        return parse_record(row)
    except (KeyError, TypeError, ValueError) as exc:
        raise malformed(schema, fn, f"a job record ({exc})", data) from None


def record_page(schema: str, data: Any, limit: int) -> tuple[list[JobRecord], Position | None]:
    """``limit + 1`` records asked for: the page and the position after it (None: last)."""
    if not isinstance(data, list):
        raise malformed(schema, "list_jobs_v2", "a list of job records", data)
    records = [record(schema, "list_jobs_v2", row) for row in data[: limit + 1]]
    page = records[:limit]
    if len(records) <= limit or not page:
        return page, None
    return page, Position(page[-1].id, page[-1].queue, page[-1].enqueued_at)


def instant(value: datetime | None) -> str | None:
    """A timestamp argument as PostgREST takes it (ISO 8601), None as null."""
    return None if value is None else value.isoformat()
