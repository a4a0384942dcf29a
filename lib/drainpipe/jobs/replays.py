"""Replaying dead jobs safely (docs/policies.md#replaying-safely): ``replay`` and
``retry_dead`` under a queue policy's replay rules and the application's ``replay_check``.

Where each rule lives:

- ``QueuePolicy(replay_window=, replayable=)`` is enforced by the SQL that creates a
  replay (``drainpipe.replay_dead_job_v3``), so every path refuses alike: these calls, the
  sync twin, the management routes, PostgREST, SQL. A ``Jobs`` sends its declared rules
  along (they apply even before ``ensure_policies()``); the stored ones apply on top.
- ``Jobs(replay_check=fn)`` runs in the application, on the job's record, before the
  replay statement: the authorization that holds now, not the one at enqueue time.

The pieces both twins share are plain functions here; :class:`ReplaysMixin` is the async
twin's half (``sync.Jobs`` has its own, calling the same functions).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

from ..backends.reduced import refused_as
from ..codes import EVENT_EXPIRED, REPLAY_BLOCKED, REPLAY_RULES, valid_code
from ..errors import DrainpipeError
from ..models import JobRecord, ReplayReport

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..backends.driver import Driver
    from .policy import QueuePolicy

__all__ = [
    "ReplayCheck",
    "ReplaysMixin",
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


async def _answer(check: ReplayCheck, record: JobRecord) -> str | None:
    result = check(record)
    if inspect.isawaitable(result):
        result = await result
    return checked_code(result)


class ReplaysMixin:
    """``replay`` and ``retry_dead`` of :class:`~drainpipe.jobs.Jobs`."""

    backend: QueueBackend
    driver: Driver
    _replay_check: ReplayCheck | None

    if TYPE_CHECKING:

        def policy(self, queue: str) -> QueuePolicy | None: ...
        async def get(self, queue: str, job_id: int) -> JobRecord | None: ...
        def _replay_args(self, queue: str, job_id: Any) -> int: ...
        def _retry_dead_args(self, queue: str, ids: Any, limit: Any) -> list[int] | None: ...

    def replay_rules(self, queue: str) -> tuple[float | None, bool]:
        """The declared (replay_window, replayable) of ``queue`` sent with each replay."""
        return declared_rules(self.policy(queue))

    async def replay_refusal(self, queue: str, job_id: int) -> str | None:
        """What ``replay_check`` answers for this job now (None: go on, or no check, or
        the job is no replay candidate, or its queue refuses replays anyway)."""
        check = self._replay_check
        if check is None or not self.replay_rules(queue)[1]:
            return None
        record = await self.get(queue, job_id)
        return await _answer(check, record) if record and replay_candidate(record) else None

    async def replay(self, queue: str, job_id: int) -> int | None:
        """Enqueue a dead job again as its child (same payload, dedupe key, tenant and
        max_attempts; ``parent_id`` = ``job_id``); the dead job stays dead with
        ``replayed_by``. The child's id, or None unless a dead job not replayed yet.

        Refused with ``DrainpipeError`` kind ``conflict`` (409): ``EVENT_EXPIRED``,
        ``REPLAY_BLOCKED`` (the queue's replay rules), or the code ``replay_check``
        answered."""
        job_id = self._replay_args(queue, job_id)
        code = await self.replay_refusal(queue, job_id)
        if code is not None:
            raise refused(queue, job_id, code)
        window, replayable = self.replay_rules(queue)
        new_id, code = await self.driver.replay_ruled(
            queue, job_id, window=window, replayable=replayable
        )
        if code in REPLAY_RULES:
            raise refused(queue, job_id, code)
        return new_id

    async def retry_dead(
        self, queue: str, *, ids: Sequence[int] | None = None, limit: int = 1000
    ) -> ReplayReport:
        """Replay the given dead jobs (or the newest ``limit``) not replayed yet, each as a
        child like ``replay``. Returns how many went back: a :class:`~drainpipe.ReplayReport`,
        an ``int`` that also maps each replayed id to its child (``replayed``) and each
        refused one to its code (``refused``), so a refusal never stops the others."""
        ids = self._retry_dead_args(queue, ids, limit)
        driver = self.driver
        window, replayable = self.replay_rules(queue)
        by_check: dict[int, str] = {}
        if self._replay_check is not None and replayable:
            ids, by_check = await self._checked_ids(queue, ids, limit)
            if not ids:
                return report((), by_check)
        if "retry_dead_ruled" in driver.lacks and window is None and replayable:
            # a storage that only counts its replays (no per-job rows, no rules to apply)
            count = int(await driver.retry_dead(queue, ids=ids, limit=limit))
            return ReplayReport({}, by_check, count=count)
        outcomes = await driver.retry_dead_ruled(
            queue, ids=ids, limit=limit, window=window, replayable=replayable
        )
        return report(outcomes, by_check)

    async def _checked_ids(
        self, queue: str, ids: list[int] | None, limit: int
    ) -> tuple[list[int], dict[int, str]]:
        """The candidates ``replay_check`` lets through, and the ones it refused."""
        assert self._replay_check is not None
        if ids is None:
            with refused_as("retry_dead"):
                found = await self.driver.list_dead(queue, limit=limit, before=None)
            ids = [dead.id for dead in found]
        allowed: list[int] = []
        by_check: dict[int, str] = {}
        for job_id in newest(ids, limit):
            record = await self.get(queue, job_id)
            code = await _answer(self._replay_check, record) if replay_candidate(record) else None
            if code is None:
                allowed.append(job_id)  # the storage says why a non-candidate is not replayed
            else:
                by_check[job_id] = code
        return allowed, by_check
