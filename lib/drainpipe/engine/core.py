"""The lease engine's arithmetic: pure functions of their arguments, no I/O, no clock.

Every function that needs the time takes ``now`` (an ``asyncio`` loop time, in seconds), so
the runner, the drain route and a test all compute the same answers from the same inputs.
"""

from __future__ import annotations

from typing import Final

#: Transient claim errors (``errors.TRANSIENT_KINDS``) retried per lane before the run stops.
CLAIM_RETRIES: Final = 3
#: How long ``work`` rides out transient claim errors (a restart, a failover, a pooler
#: restart) before it gives up, in seconds; ``drain`` and the drain route keep their budget.
MAX_OUTAGE: Final = 300.0
#: The longest wait between two claims while riding out an outage.
OUTAGE_WAIT_CAP: Final = 30.0
#: Heartbeats of job leases never come more often than this (API.md section 2).
JOB_HEARTBEAT_FLOOR: Final = 1.0


def claim_retry_wait(retry: int, first_wait: float) -> float:
    """The wait before transient claim retry number ``retry`` (1-based): ``first_wait``,
    then doubling (1, 2, 4 s for ``first_wait=1``)."""
    return first_wait * 2.0 ** (retry - 1)


def should_retry_claim(transient: bool, retries_done: int, limit: int = CLAIM_RETRIES) -> bool:
    """True when a failed claim is retried: only transient errors, at most ``limit`` times."""
    return transient and retries_done < limit


def outage_wait(
    retry: int, first_wait: float, uniform: float, cap: float = OUTAGE_WAIT_CAP
) -> float:
    """The wait before claim retry number ``retry`` (1-based) while riding out an outage:
    doubling from ``first_wait``, capped at ``cap``, half of it jittered by ``uniform`` (a
    draw in [0, 1)) so workers that lost the database together do not come back in step."""
    base = min(cap, first_wait * 2.0 ** (retry - 1))
    return base / 2 + uniform * base / 2


def outage_left(started: float, now: float, max_outage: float) -> float:
    """Seconds of an outage that began at ``started`` still to ride out (0: give up)."""
    return max(0.0, started + max_outage - now)


def next_idle_wait(wait: float, max_wait: float) -> float:
    """The next idle poll wait after an empty claim: doubling, capped at ``max_wait``."""
    return min(wait * 2, max_wait)


def heartbeat_interval(lease: float, every: float | None = None, floor: float = 0.0) -> float:
    """Seconds between heartbeats: ``every`` when given, else half the lease, never below
    ``floor`` (jobs use 1 s, the webhook inbox none: its contract says every half lease)."""
    if every is not None:
        return every
    return max(floor, lease / 2)


def run_deadline(now: float, budget: float | None, deadline: float | None) -> float | None:
    """The loop time a run stops claiming at: the earlier of ``now + budget`` and
    ``deadline``; None when neither is given (run until empty or told to stop)."""
    if budget is None:
        return deadline
    by_budget = now + budget
    return by_budget if deadline is None else min(deadline, by_budget)


def budget_spent(now: float, deadline: float | None) -> bool:
    """True once ``deadline`` (a loop time, or None for no deadline) is reached."""
    return deadline is not None and now >= deadline


def time_left(now: float, deadline: float) -> float:
    """Seconds until ``deadline``, never negative."""
    return max(0.0, deadline - now)


def route_lease(now: float, deadline: float, floor: float, margin: float) -> float:
    """The lease the drain route claims with: the rest of its budget plus ``margin``, so a
    handler still running when the call ends keeps its job past the next cron call; never
    below ``floor`` (the route's ``lease`` option)."""
    return max(floor, time_left(now, deadline) + margin)


def fair_share_deadline(now: float, deadline: float, sources_left: int) -> float:
    """The deadline of the next source when ``sources_left`` sources (this one included)
    share what is left of the budget equally. A source that finishes early leaves its
    unused time to the ones after it, since each share is taken from what is left."""
    if sources_left <= 1:
        return deadline
    return now + time_left(now, deadline) / sources_left
