# generated from lib/drainpipe/backends/sql_leases.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""Claiming, extending and settling jobs on the SQL backend, the path every drain runs:
the statements, their parameters and the reading of their rows, beside the calls of
:class:`~drainpipe.backends.sql.SqlQueueBackend` that run them (:class:`SqlLeases`).

Each is one call of a ``drainpipe.*`` function (the same for the pgmq and the table
storage), one round trip; every settlement and extension is fenced by the claimed
attempt. ``drainpipe.sync.backend_leases`` is generated from this module
(``./scripts/sync-twin``): its calls run these very statements on a
:class:`~drainpipe.db.sync.SyncDatabase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backends.sql_leases import (
    CLAIM,
    COMPLETE,
    COMPLETE_AND_CLAIM,
    COMPLETE_MANY,
    EXTEND,
    EXTEND_MANY,
    FAIL,
    FAIL_CODED,
    SKIP,
    claim_params,
    complete_and_claim_params,
    complete_many_params,
    complete_params,
    extend_many_params,
    extend_params,
    fail_coded_params,
    fail_params,
    parse_claim,
    parse_complete,
    parse_complete_and_claim,
    parse_complete_many,
    parse_extend,
    parse_extend_many,
    parse_fail,
    parse_fail_coded,
    parse_skip,
    skip_params,
)
from ..db.sync import SyncDatabase
from ..models import FailOutcome, Job

# -- the calls that run them (SqlQueueBackend's claim, extend and settle) -----------------


class SyncSqlLeases:
    """The claim, extend and settle calls of :class:`~drainpipe.backends.sql.SqlQueueBackend`."""

    db: SyncDatabase

    def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        rows = self.db.fetch(CLAIM, claim_params(queue, lease, batch))
        return parse_claim(queue, rows)

    def complete(self, job: Job[Any]) -> bool:
        return parse_complete(self.db.fetch(COMPLETE, complete_params(job)))

    def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete several jobs of one queue in one round trip; each still fenced."""
        if not jobs:
            return []
        rows = self.db.fetch(COMPLETE_MANY, complete_many_params(jobs))
        return parse_complete_many(jobs, rows)

    def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        """Complete ``jobs`` (each fenced) and claim up to ``batch`` more, in one call and one
        transaction; returns (the jobs whose completion was refused, the claimed jobs)."""
        rows = self.db.fetch(
            COMPLETE_AND_CLAIM, complete_and_claim_params(queue, jobs, lease, batch)
        )
        return parse_complete_and_claim(queue, jobs, rows)

    def fail(self, job: Job[Any], error: str, retry_in: float | None = None) -> FailOutcome | None:
        return parse_fail(self.db.fetch(FAIL, fail_params(job, error, retry_in)))

    def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        params = fail_coded_params(job, error, retry_in, code, discard)
        return parse_fail_coded(self.db.fetch(FAIL_CODED, params))

    def skip(self, job: Job[Any], code: str) -> bool:
        return parse_skip(self.db.fetch(SKIP, skip_params(job, code)))

    def extend(self, job: Job[Any], lease: float) -> bool:
        return parse_extend(self.db.fetch(EXTEND, extend_params(job, lease)))

    def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of several jobs of one queue; returns the ids still held."""
        if not jobs:
            return set()
        rows = self.db.fetch(EXTEND_MANY, extend_many_params(jobs, lease))
        return parse_extend_many(rows)
