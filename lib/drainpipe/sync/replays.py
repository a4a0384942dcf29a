# generated from lib/drainpipe/jobs/replay_calls.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""``replay`` and ``retry_dead`` of :class:`~drainpipe.jobs.Jobs` (docs/policies.md#replaying-safely),
over the rules of :mod:`drainpipe.jobs.replays`. ``drainpipe.sync.replays`` is generated from
this module (``./scripts/sync-twin``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..backends.reduced import refused_as
from ..codes import REPLAY_RULES
from ..jobs.replays import (
    ReplayCheck,
    checked_code,
    declared_rules,
    newest,
    refused,
    replay_candidate,
    report,
)
from ..models import JobRecord, ReplayReport
from .awaiting import settled

if TYPE_CHECKING:
    from ..jobs.policy import QueuePolicy
    from .backend import SyncSqlBackend

__all__ = ["SyncReplaysMixin"]


def _answer(check: ReplayCheck, record: JobRecord) -> str | None:
    return checked_code(settled(check(record), "replay_check"))


class SyncReplaysMixin:
    """``replay`` and ``retry_dead`` of :class:`~drainpipe.jobs.Jobs`."""

    backend: SyncSqlBackend
    driver: SyncSqlBackend
    _replay_check: ReplayCheck | None

    if TYPE_CHECKING:

        def policy(self, queue: str) -> QueuePolicy | None: ...
        def get(self, queue: str, job_id: int) -> JobRecord | None: ...
        def _replay_args(self, queue: str, job_id: Any) -> int: ...
        def _retry_dead_args(self, queue: str, ids: Any, limit: Any) -> list[int] | None: ...

    def replay_rules(self, queue: str) -> tuple[float | None, bool]:
        """The declared (replay_window, replayable) of ``queue`` sent with each replay."""
        return declared_rules(self.policy(queue))

    def replay_refusal(self, queue: str, job_id: int) -> str | None:
        """What ``replay_check`` answers for this job now (None: go on, or no check, or
        the job is no replay candidate, or its queue refuses replays anyway)."""
        check = self._replay_check
        if check is None or not self.replay_rules(queue)[1]:
            return None
        record = self.get(queue, job_id)
        return _answer(check, record) if record and replay_candidate(record) else None

    def replay(self, queue: str, job_id: int) -> int | None:
        """Enqueue a dead job again as its child (same payload, dedupe key, tenant and
        max_attempts; ``parent_id`` = ``job_id``); the dead job stays dead with
        ``replayed_by``. The child's id, or None unless a dead job not replayed yet.

        Refused with ``DrainpipeError`` kind ``conflict`` (409): ``EVENT_EXPIRED``,
        ``REPLAY_BLOCKED`` (the queue's replay rules), or the code ``replay_check``
        answered."""
        job_id = self._replay_args(queue, job_id)
        code = self.replay_refusal(queue, job_id)
        if code is not None:
            raise refused(queue, job_id, code)
        window, replayable = self.replay_rules(queue)
        new_id, code = self.driver.replay_ruled(queue, job_id, window=window, replayable=replayable)
        if code in REPLAY_RULES:
            raise refused(queue, job_id, code)
        return new_id

    def retry_dead(
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
            ids, by_check = self._checked_ids(queue, ids, limit)
            if not ids:
                return report((), by_check)
        if "retry_dead_ruled" in driver.lacks and window is None and replayable:
            # a storage that only counts its replays (no per-job rows, no rules to apply)
            count = int(driver.retry_dead(queue, ids=ids, limit=limit))
            return ReplayReport({}, by_check, count=count)
        outcomes = driver.retry_dead_ruled(
            queue, ids=ids, limit=limit, window=window, replayable=replayable
        )
        return report(outcomes, by_check)

    def _checked_ids(
        self, queue: str, ids: list[int] | None, limit: int
    ) -> tuple[list[int], dict[int, str]]:
        """The candidates ``replay_check`` lets through, and the ones it refused."""
        assert self._replay_check is not None
        if ids is None:
            with refused_as("retry_dead"):
                found = self.driver.list_dead(queue, limit=limit, before=None)
            ids = [dead.id for dead in found]
        allowed: list[int] = []
        by_check: dict[int, str] = {}
        for job_id in newest(ids, limit):
            record = self.get(queue, job_id)
            code = _answer(self._replay_check, record) if replay_candidate(record) else None
            if code is None:
                allowed.append(job_id)  # the storage says why a non-candidate is not replayed
            else:
                by_check[job_id] = code
        return allowed, by_check
