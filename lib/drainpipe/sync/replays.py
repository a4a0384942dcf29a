"""``replay`` and ``retry_dead`` of :class:`drainpipe.sync.Jobs`: the async twin's
(:mod:`drainpipe.jobs.replays`) over the sync backend, with the same rules, checks, errors
and results. ``sync.Jobs`` declares no policies: the rules the database keeps apply
(``ensure_policies()`` of an async ``Jobs`` stores them), and ``replay_check`` must be a
plain function."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..codes import REPLAY_RULES
from ..jobs.replays import ReplayCheck, checked_code, newest, refused, replay_candidate, report
from ..models import JobRecord, ReplayReport

if TYPE_CHECKING:
    from .backend import SyncSqlBackend


def _answer(check: ReplayCheck, record: JobRecord) -> str | None:
    result = check(record)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # never awaited: no "coroutine was never awaited" warning
        raise TypeError("sync.Jobs needs a plain replay_check function, not an async one")
    return checked_code(result)


class SyncReplaysMixin:
    """``replay`` and ``retry_dead`` as :class:`drainpipe.Jobs` has them."""

    backend: SyncSqlBackend
    _replay_check: ReplayCheck | None

    if TYPE_CHECKING:

        def get(self, queue: str, job_id: int) -> JobRecord | None: ...
        def _replay_args(self, queue: str, job_id: Any) -> int: ...
        def _retry_dead_args(self, queue: str, ids: Any, limit: Any) -> list[int] | None: ...

    def replay_rules(self, queue: str) -> tuple[float | None, bool]:
        """No declared rules (``sync.Jobs`` takes no policies): the stored ones apply."""
        return None, True

    def replay_refusal(self, queue: str, job_id: int) -> str | None:
        """What ``replay_check`` answers for this job now (None: go on)."""
        check = self._replay_check
        if check is None:
            return None
        record = self.get(queue, job_id)
        return _answer(check, record) if replay_candidate(record) else None

    def replay(self, queue: str, job_id: int) -> int | None:
        """Enqueue a dead letter again as its child; its new id, or None unless a dead job
        not replayed yet. Refused (409 ``conflict``) with ``EVENT_EXPIRED``,
        ``REPLAY_BLOCKED`` or ``replay_check``'s code."""
        job_id = self._replay_args(queue, job_id)
        code = self.replay_refusal(queue, job_id)
        if code is not None:
            raise refused(queue, job_id, code)
        new_id, code = self.backend.replay_ruled(queue, job_id, window=None, replayable=True)
        if code in REPLAY_RULES:
            raise refused(queue, job_id, code)
        return new_id

    def retry_dead(
        self, queue: str, *, ids: Sequence[int] | None = None, limit: int = 1000
    ) -> ReplayReport:
        """Replay the given dead letters (or the newest ``limit``): how many went back, as a
        :class:`~drainpipe.ReplayReport` (``replayed`` and ``refused`` per job)."""
        checked = self._retry_dead_args(queue, ids, limit)
        by_check: dict[int, str] = {}
        check = self._replay_check
        if check is not None:
            if checked is None:
                dead = self.backend.list_dead(queue, limit=limit, before=None)
                checked = [job.id for job in dead]
            allowed: list[int] = []
            for job_id in newest(checked, limit):
                record = self.get(queue, job_id)
                code = _answer(check, record) if replay_candidate(record) else None
                if code is None:
                    allowed.append(job_id)
                else:
                    by_check[job_id] = code
            if not allowed:
                return report((), by_check)
            checked = allowed
        outcomes = self.backend.retry_dead_ruled(
            queue, ids=checked, limit=limit, window=None, replayable=True
        )
        return report(outcomes, by_check)
