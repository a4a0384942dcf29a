"""The job-record checks of the conformance kit (:func:`drainpipe.testing.check_queue_backend`),
for backends that implement :class:`~drainpipe.backends.capabilities.SupportsRecords`.

- ``records_states``: a sent job reads ``queued`` with no history, ``leased`` with a
  ``running`` attempt once read, ``succeeded`` with ``finished_at`` and a ``succeeded``
  attempt once completed; an unknown id reads None;
- ``records_cancel``: cancelling a leased job answers ``"cancelled"``; the holder's
  ``extend`` and ``complete`` answer False, the record stays ``cancelled`` (``last_code``
  ``CANCELLED``) and keeps ``late_outcome="succeeded"``; a second cancel answers
  ``"terminal"``, an unknown id None;
- ``records_replay``: a dead job replays to a child with ``parent_id``; the parent stays
  dead with ``replayed_by``; a second replay answers None;
- ``records_list``: pages of one record, newest first, list every job of the check once,
  and no record carries the payload or the error text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECORD_CHECKS"]

_MARKER = "conformance-payload-marker"
_ERROR = "conformance-error-marker"


async def _one(
    backend: Any, queue: str, check: Any, payload: dict[str, Any], **options: Any
) -> Any:
    job_id = await backend.send(
        queue, payload, delay=0, max_attempts=options.get("max_attempts", 3)
    )
    jobs = await backend.read(queue, lease=30.0, batch=1)
    ids = [job.id for job in jobs]
    if not check.expect(ids == [job_id], f"read returned ids {ids}; expected [{job_id}]"):
        return None
    return jobs[0]


async def _states(backend: Any, queue: str, check: Any) -> None:
    job_id = await backend.send(queue, {"check": "records_states"}, delay=0, max_attempts=3)
    queued = await backend.get_record(queue, job_id)
    if not check.expect(
        queued is not None and queued.state == "queued" and queued.history == (),
        f"get_record after send returned {queued!r}; expected state queued, no history",
    ):
        return
    [job] = await backend.read(queue, lease=30.0, batch=1)
    leased = await backend.get_record(queue, job_id)
    check.expect(
        leased is not None
        and leased.state == "leased"
        and [a.outcome for a in leased.history] == ["running"],
        f"get_record after read returned {leased!r}; expected leased with a running attempt",
    )
    await backend.complete(job)
    done = await backend.get_record(queue, job_id)
    check.expect(
        done is not None
        and done.state == "succeeded"
        and done.finished_at is not None
        and [a.outcome for a in done.history] == ["succeeded"],
        f"get_record after complete returned {done!r}; expected succeeded",
    )
    missing = await backend.get_record(queue, job_id + 10_000_000)
    check.expect(missing is None, f"get_record of an unknown id returned {missing!r}")


async def _cancel(backend: Any, queue: str, check: Any) -> None:
    job = await _one(backend, queue, check, {"check": "records_cancel"})
    if job is None:
        return
    answer = await backend.cancel(queue, job.id)
    check.expect(answer == "cancelled", f"cancel of a leased job returned {answer!r}")
    extended = await backend.extend(job, 60)
    check.expect(extended is False, f"extend after the cancel returned {extended!r}")
    done = await backend.complete(job)
    check.expect(done is False, f"complete after the cancel returned {done!r}")
    record = await backend.get_record(queue, job.id)
    check.expect(
        record is not None
        and record.state == "cancelled"
        and record.last_code == "CANCELLED"
        and record.history[-1].late_outcome == "succeeded",
        f"the cancelled record was {record!r}",
    )
    again = await backend.cancel(queue, job.id)
    check.expect(again == "terminal", f"a second cancel returned {again!r}; expected terminal")
    unknown = await backend.cancel(queue, job.id + 10_000_000)
    check.expect(unknown is None, f"cancel of an unknown id returned {unknown!r}")


async def _replay(backend: Any, queue: str, check: Any) -> None:
    job = await _one(backend, queue, check, {"check": "records_replay"}, max_attempts=1)
    if job is None:
        return
    outcome = await backend.fail(job, _ERROR, 0)
    if not check.expect(outcome == "dead", f"fail on the last attempt returned {outcome!r}"):
        return
    child = await backend.replay(queue, job.id)
    if not check.expect(isinstance(child, int), f"replay returned {child!r}; expected an id"):
        return
    parent = await backend.get_record(queue, job.id)
    new = await backend.get_record(queue, child)
    check.expect(
        parent is not None and parent.state == "dead" and parent.replayed_by == child,
        f"the replayed parent was {parent!r}",
    )
    check.expect(new is not None and new.parent_id == job.id, f"the child was {new!r}")
    again = await backend.replay(queue, job.id)
    check.expect(again is None, f"a second replay returned {again!r}; expected None")
    for claimed in await backend.read(queue, lease=30.0, batch=10):  # leave the queue empty
        await backend.complete(claimed)


async def _list(backend: Any, queue: str, check: Any) -> None:
    mine = [
        await backend.send(
            queue, {"check": "records_list", "marker": _MARKER}, delay=0, max_attempts=3
        )
        for _ in range(3)
    ]
    seen: list[int] = []
    before = None
    for _ in range(1000):
        records, before = await backend.list_records(
            queue, state=None, tenant=None, limit=1, before=before
        )
        seen += [record.id for record in records]
        for record in records:
            text = repr(record)
            check.expect(
                _MARKER not in text and _ERROR not in text, f"{text} holds the payload or error"
            )
        if before is None:
            break
    check.expect(
        seen[:3] == mine[::-1], f"the first records listed were {seen[:3]}; expected {mine[::-1]}"
    )
    check.expect(len(seen) == len(set(seen)), f"a record was listed twice: {seen}")
    for claimed in await backend.read(queue, lease=30.0, batch=10):  # leave the queue empty
        await backend.complete(claimed)


RECORD_CHECKS = (
    ("records_states", _states),
    ("records_cancel", _cancel),
    ("records_replay", _replay),
    ("records_list", _list),
)
