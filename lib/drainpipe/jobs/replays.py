"""Replaying dead jobs safely (docs/policies.md#replaying-safely): ``replay`` and
``retry_dead`` under a queue policy's replay rules and the application's ``replay_check``.

Where each rule lives:

- ``QueuePolicy(replay_window=, replayable=)`` is enforced by the SQL that creates a
  replay (``drainpipe.replay_dead_job_v3``), so every path refuses alike: these calls, the
  sync twin, the management routes, PostgREST, SQL. A ``Jobs`` sends its declared rules
  along (they apply even before ``ensure_policies()``); the stored ones apply on top.
- ``Jobs(replay_check=fn)`` runs in the application, on the job's record, before the
  replay statement: the authorization that holds now, not the one at enqueue time.

The pieces both twins share are plain functions here; the calls are
:mod:`drainpipe.jobs.replay_calls` (and its generated sync twin).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

from ..codes import EVENT_EXPIRED, REPLAY_BLOCKED, valid_code
from ..errors import DrainpipeError
from ..models import JobRecord, ReplayReport

if TYPE_CHECKING:
    from .policy import QueuePolicy

__all__ = [
    "ReplayCheck",
    "check_replay_check",
    "checked_code",
    "declared_rules",
    "refused",
    "replay_candidate",
    "report",
]

#: ``fn(record) -> None | code``, plain or async: None lets the replay go on; a code
#: (``^[A-Z][A-Z0-9_]{0,63}$``) refuses it with 409 and that code.
ReplayCheck: TypeAlias = Callable[[JobRecord], "str | Awaitable[str | None] | None"]

#: (dead job id, child id or None, why not or None), as the storages answer per job
Outcome: TypeAlias = tuple[int, int | None, str | None]


def check_replay_check(fn: Any) -> ReplayCheck | None:
    if fn is not None and not callable(fn):
        raise TypeError("replay_check must be a function fn(record) -> None | code")
    return fn  # type: ignore[no-any-return]


def checked_code(result: Any) -> str | None:
    """What ``replay_check`` answered: None, or a valid code (anything else is the
    application's bug: ``TypeError``, nothing replayed)."""
    if result is None:
        return None
    if not valid_code(result):
        raise TypeError(
            f"replay_check must return None or a code matching ^[A-Z][A-Z0-9_]{{0,63}}$,"
            f" not {result!r}"
        )
    return str(result)


def declared_rules(policy: QueuePolicy | None) -> tuple[float | None, bool]:
    """(replay_window, replayable) of a declared policy; no rules without one."""
    return (None, True) if policy is None else policy.replay_rules


def replay_candidate(record: JobRecord | None) -> TypeGuard[JobRecord]:
    """Whether a replay could create a child: a dead job not replayed yet. Others are
    refused by the storage (not dead, replayed already) without asking ``replay_check``."""
    return record is not None and record.state == "dead" and record.replayed_by is None


def refused(queue: str, job_id: int, code: str) -> DrainpipeError:
    """The 409 a refused replay answers (``conflict``, with the code)."""
    if code == EVENT_EXPIRED:
        message = (
            f"Job {job_id} of {queue} was not replayed: its event is older than the queue's"
            " replay_window"
        )
    elif code == REPLAY_BLOCKED:
        message = f"Jobs of {queue} are not replayed: its policy has replayable=False"
    else:
        message = f"Job {job_id} of {queue} was not replayed: replay_check answered {code}"
    return DrainpipeError("conflict", message, code=code)


def report(outcomes: Iterable[Outcome], refused_by_check: dict[int, str]) -> ReplayReport:
    """``retry_dead``'s result from the storage's rows and the check's refusals."""
    replayed: dict[int, int] = {}
    why_not = dict(refused_by_check)
    for job_id, new_id, code in outcomes:
        if new_id is not None:
            replayed[job_id] = new_id
        else:
            why_not[job_id] = code or "JOB_NOT_DEAD"
    return ReplayReport(replayed, why_not)


def newest(ids: Sequence[int], limit: int) -> list[int]:
    """The ids ``retry_dead`` tries: distinct, newest first, at most ``limit``."""
    return sorted(set(ids), reverse=True)[:limit]
