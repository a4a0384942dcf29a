"""Queue policies in the memory backend: the limits the database enforces after
``ensure_policies()`` (the pending cap, retention), so tests without Postgres see them.

Flow control (docs/flow-control.md) is refused, not imitated: its limits hold across
processes only because the claim's SQL enforces them, and a test passing here against a
copy of them would say nothing about that SQL. A policy with limits is refused by
``ensure_policy``, naming them; a priority by ``send``; debounce and throttle have no
``send_flow`` here (``Jobs`` answers that the backend lacks them). Keys are kept: without
limits they change nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ...errors import queue_full
from .values import flow_unsupported

# the flow-control parameters of ensure_queue_policy_v3 (QueuePolicy.as_row), by position
_FLOW_FIELDS = (
    (12, "concurrency"),
    (13, "key_concurrency"),
    (14, "rate"),
    (16, "key_rate"),
    (18, "ordered"),
)


class MemoryPolicies:
    """``ensure_policy``/``apply_retention`` and the pending check ``send`` calls."""

    _queues: dict[str, Any]
    _policy_rows: dict[str, tuple[int, float]]  # queue -> (max_pending, retention seconds)
    _replay_rules: dict[str, tuple[float | None, bool]]  # queue -> (replay_window, replayable)
    _retention_ran: datetime | None

    def now(self) -> datetime:
        raise NotImplementedError

    def _init_policies(self) -> None:
        self._policy_rows = {}
        self._replay_rules = {}
        self._retention_ran = None

    async def ensure_policy(self, queue: str, row: Sequence[Any]) -> None:
        # the parameters of drainpipe.ensure_queue_policy_v3 (QueuePolicy.as_row)
        limits = [name for at, name in _FLOW_FIELDS if len(row) > at and row[at]]
        if limits:
            raise flow_unsupported(f"queue {queue!r}'s policy sets {', '.join(limits)}")
        self._policy_rows[queue] = (int(row[2]), float(row[8]))
        window, replayable = (row[10], row[11]) if len(row) > 11 else (None, True)
        self._replay_rules[queue] = (None if window is None else float(window), bool(replayable))

    def _check_pending(self, queue: str, adding: int) -> None:
        policy = self._policy_rows.get(queue)
        if policy is None:
            return
        state = self._queues.get(queue)
        live = 0 if state is None else len(state.live)
        if live + adding > policy[0]:
            raise queue_full(queue, policy[0])

    async def apply_retention(self, *, min_interval: float | None) -> int | None:
        now = self.now()
        if min_interval is not None:
            ran = self._retention_ran
            if ran is not None and ran > now - timedelta(seconds=min_interval):
                return None
            self._retention_ran = now
        deleted = 0
        for queue, (_, retention) in sorted(self._policy_rows.items()):
            state = self._queues.get(queue)
            if state is None:
                continue
            cutoff = now - timedelta(seconds=retention)
            # terminal records (succeeded, dead, cancelled) and their attempt rows
            old = [i for i, done in state.finished.items() if done.finished_at < cutoff]
            for job_id in old:
                del state.finished[job_id]
                state.attempts.pop(job_id, None)
            deleted += len(old)
        return deleted
