"""Pausing a queue: the statements of ``Jobs.pause``/``resume`` and the paused lookup.
See :mod:`drainpipe.statements` for the shape."""

from __future__ import annotations

from collections.abc import Sequence

from ..db.statement_shapes import Params, Row
from ..models import held_counts

PAUSE = "SELECT drainpipe.pause_queue_v1(%s)"
RESUME = "SELECT drainpipe.resume_queue_v1(%s)"
PAUSED = "SELECT drainpipe.paused_queues_v1(%s)"
#: why each queued job of a limited queue is held (docs/flow-control.md)
FLOW_HOLDS = "SELECT queue, id, held_by FROM drainpipe.job_flow_holds_v1(%s, %s)"
#: whether each queue is paused, and its held counts: the drain route's report
QUEUE_HOLDS = "SELECT queue, paused, held FROM drainpipe.job_queue_holds_v1(%s)"


def queue_params(queue: str) -> Params:
    return (queue,)


def paused_params(queues: Sequence[str]) -> Params:
    return (list(queues),)


def parse_changed(rows: list[Row]) -> bool:
    """True when the call changed the queue's state (paused a running one, or resumed)."""
    return bool(rows[0][0]) if rows else False


def parse_paused(rows: list[Row]) -> set[str]:
    return {str(row[0]) for row in rows}


def flow_holds_params(jobs: Sequence[tuple[str, int]]) -> Params:
    return ([queue for queue, _ in jobs], [job_id for _, job_id in jobs])


def parse_flow_holds(rows: list[Row]) -> dict[tuple[str, int], str]:
    """``(queue, id) -> "order" | "concurrency" | "rate"`` for the held ones."""
    return {(str(row[0]), int(row[1])): str(row[2]) for row in rows}


def parse_queue_holds(rows: list[Row]) -> tuple[set[str], dict[str, dict[str, int]]]:
    """Rows ``(queue, paused, held)`` → (the paused queues, the held counts of the queues
    that have held jobs)."""
    paused = {str(row[0]) for row in rows if row[1]}
    held = {str(row[0]): counts for row in rows if (counts := held_counts(row[2]))}
    return paused, held
