"""The one driver interface: every operation ``Jobs`` asks of a storage.

The SQL backend (pgmq and table storage) and PostgREST's ``drainpipe_api`` implement all of
it, proven by one conformance suite (``tests/backends/test_driver_conformance.py``). A
backend that lacks operations (``pgmq_public``, the in-memory backend, a custom
:class:`~drainpipe.backends.QueueBackend`) is made a complete driver by
:func:`~drainpipe.backends.reduced.as_driver`, which answers each missing operation from one
table: a stand-in built from the operations it has, or the contract's ``invalid_request``
naming the feature. Call sites call the driver; they never ask what it can do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from . import QueueBackend
from .capabilities import (
    SupportsBatches,
    SupportsBury,
    SupportsCodedSettle,
    SupportsCompleteAndClaim,
    SupportsDeadLetters,
    SupportsFlowEnqueue,
    SupportsFlowHolds,
    SupportsPause,
    SupportsPayloadRewrite,
    SupportsPolicies,
    SupportsQueueHolds,
    SupportsRecords,
    SupportsReplayRules,
    SupportsSchedules,
    SupportsStats,
    SupportsSteps,
)

if TYPE_CHECKING:
    from .postgrest import PostgrestBackend
    from .reduced import ReducedDriver
    from .sql import SqlQueueBackend

__all__ = ["OPERATIONS", "Driver"]


class Driver(
    QueueBackend,
    SupportsBatches,
    SupportsCompleteAndClaim,
    SupportsCodedSettle,
    SupportsBury,
    SupportsFlowEnqueue,
    SupportsStats,
    SupportsDeadLetters,
    SupportsReplayRules,
    SupportsRecords,
    SupportsPayloadRewrite,
    SupportsPolicies,
    SupportsPause,
    SupportsFlowHolds,
    SupportsQueueHolds,
    SupportsSchedules,
    SupportsSteps,
    Protocol,
):
    """Stores, leases and settles jobs, and everything around them (records, dead letters,
    policies, pause, flow control, schedules, durable steps).

    ``lacks`` names the operations a reduced driver answers without its backend (each one
    stated in :data:`drainpipe.backends.reduced.MISSING`); empty for a complete driver."""

    lacks: frozenset[str]


#: Every operation of :class:`Driver` past the required five, by name (what a reduced
#: driver looks up on the backend it wraps).
OPERATIONS: tuple[str, ...] = (
    # batches and the fused settle-and-claim
    "send_many",
    "complete_many",
    "extend_many",
    "complete_and_claim",
    # settlements with a code
    "skip",
    "fail_coded",
    "bury",
    # flow control
    "send_flow",
    "flow_holds",
    "queue_holds",
    # stats, dead letters, replays
    "stats",
    "replay",
    "replay_ruled",
    "retry_dead_ruled",
    "list_dead",
    "retry_dead",
    "purge_archive",
    # job records
    "get_record",
    "list_records",
    "cancel",
    # policies and encrypted payloads
    "ensure_policy",
    "apply_retention",
    "live_payloads",
    "rewrite_payload",
    # pause
    "pause",
    "resume",
    "paused",
    # schedules
    "schedule",
    "unschedule",
    "list_schedules",
    "unschedule_tenant",
    "due_schedules",
    "advance_schedule",
    # durable steps
    "load_steps",
    "record_step",
    "suspend",
    "wait_event",
    "emit",
    "spawn",
    "join",
    "child_outcomes",
    "cancel_children",
    "job_workflow",
    "job_result",
)


if TYPE_CHECKING:

    def _complete(
        sql: SqlQueueBackend, rest: PostgrestBackend, reduced: ReducedDriver
    ) -> tuple[Driver, Driver, Driver]:
        """Never called: the type checker proves here that each one is a whole driver."""
        return sql, rest, reduced
