"""Per-queue policies (docs/reference.md section 9): limits checked by the client before sending and,
after ``jobs.ensure_policies()``, by the database for every writer.

The error each broken limit answers is built here, once, so the client and the
translation of the database's refusals (SQLSTATEs ``DPQ01``-``DPQ04``, see
:data:`drainpipe.errors.POLICY_SQLSTATES`) answer the same kind and code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

# the codes a job ends dead with are the records' (drainpipe.codes), re-exported here
from ..codes import DEADLINE_PASSED, MAX_ATTEMPTS, PAYLOAD_UNREADABLE
from ..errors import QUEUE_FULL, invalid_request, queue_full, validation_error

__all__ = [
    "DEADLINE_PASSED",
    "LEASE_TOO_LONG",
    "MAX_ATTEMPTS",
    "PAYLOAD_TOO_LARGE",
    "PAYLOAD_UNREADABLE",
    "QUEUE_FULL",
    "SCHEDULE_TOO_FAR",
    "QueuePolicy",
    "Rate",
    "check_policies",
    "queue_full",
]

PAYLOAD_TOO_LARGE: Final = "PAYLOAD_TOO_LARGE"
LEASE_TOO_LONG: Final = "LEASE_TOO_LONG"
SCHEDULE_TOO_FAR: Final = "SCHEDULE_TOO_FAR"

DAY: Final = 86400.0


def _duration(
    value: Any, name: str, *, optional: bool = False, owner: str = "QueuePolicy"
) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        raise ValueError(f"{owner}.{name} must be seconds or a timedelta")
    if not math.isfinite(result) or result <= 0:
        raise ValueError(f"{owner}.{name} must be positive")
    return result


def _count(value: Any, name: str, maximum: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"QueuePolicy.{name} must be an integer from 1 to {maximum}")
    return value


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``n`` claims (attempts started) in any interval of ``per`` seconds
    (``timedelta`` accepted). ``n`` from 1, ``per`` positive, else ``ValueError``."""

    n: int
    per: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n < 2**31:
            raise ValueError("Rate.n must be an integer from 1 to 2147483647")
        per = _duration(self.per, "per", owner="Rate")
        object.__setattr__(self, "per", per)


def _limit(value: Any, name: str) -> int | None:
    return None if value is None else _count(value, name)


def _rate(value: Any, name: str) -> Rate | None:
    if value is None or isinstance(value, Rate):
        return value
    raise ValueError(f"QueuePolicy.{name} must be a drainpipe.Rate or None")


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The limits of one queue; ``QueuePolicy()`` carries the Job Inbox limits.

    Durations are seconds (``timedelta`` accepted, stored as float seconds). Every field
    must be positive and ``lease <= max_lease``, else ``ValueError``.
    """

    max_payload_bytes: int = 65536
    max_pending: int = 10000
    lease: float = 30.0
    max_lease: float = 60.0
    max_delay: float = 7 * DAY
    max_attempts: int = 5
    attempt_window: float | None = None
    retention: float = 30 * DAY
    encrypt: bool = False
    #: a replay of a job whose source event (the first job of its replay lineage) was
    #: enqueued longer ago than this is refused, 409 ``EVENT_EXPIRED``; None: no limit
    replay_window: float | None = None
    #: False: every replay of this queue's jobs is refused, 409 ``REPLAY_BLOCKED``
    replayable: bool = True
    #: flow control (docs/flow-control.md), enforced in the claim for every claimer:
    #: at most N leased jobs of the queue at any instant; None: no limit
    concurrency: int | None = None
    #: at most N leased jobs per job key
    key_concurrency: int | None = None
    #: at most ``rate.n`` claims of the queue in any ``rate.per`` seconds
    rate: Rate | None = None
    #: the same per job key
    key_rate: Rate | None = None
    #: the jobs of one key run one at a time, in enqueue order
    ordered: bool = False

    def __post_init__(self) -> None:
        # 1 MiB is what every queue accepts (validation.MAX_PAYLOAD_BYTES)
        fields = {
            "max_payload_bytes": _count(self.max_payload_bytes, "max_payload_bytes", 1 << 20),
            "max_pending": _count(self.max_pending, "max_pending"),
            "max_attempts": _count(self.max_attempts, "max_attempts"),
            "lease": _duration(self.lease, "lease"),
            "max_lease": _duration(self.max_lease, "max_lease"),
            "max_delay": _duration(self.max_delay, "max_delay"),
            "attempt_window": _duration(self.attempt_window, "attempt_window", optional=True),
            "retention": _duration(self.retention, "retention"),
            "replay_window": _duration(self.replay_window, "replay_window", optional=True),
        }
        if not isinstance(self.encrypt, bool):
            raise ValueError("QueuePolicy.encrypt must be True or False")
        if not isinstance(self.replayable, bool):
            raise ValueError("QueuePolicy.replayable must be True or False")
        if not isinstance(self.ordered, bool):
            raise ValueError("QueuePolicy.ordered must be True or False")
        _limit(self.concurrency, "concurrency")
        _limit(self.key_concurrency, "key_concurrency")
        _rate(self.rate, "rate")
        _rate(self.key_rate, "key_rate")
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        if self.lease > self.max_lease:
            raise ValueError("QueuePolicy.lease must be at most max_lease")

    # -- the errors of each limit ----------------------------------------------------------

    def check_delay(self, delay: float) -> None:
        if delay > self.max_delay:
            raise validation_error(
                f"The job would run {delay:g} s from now, more than this queue's max_delay"
                f" of {self.max_delay:g} s",
                [{"message": f"At most {self.max_delay:g} s ahead", "path": ["delay"]}],
                code=SCHEDULE_TOO_FAR,
            )

    def check_lease(self, lease: float) -> float:
        if lease > self.max_lease:
            raise invalid_request(
                f"A lease of {lease:g} s is longer than this queue's max_lease of"
                f" {self.max_lease:g} s",
                code=LEASE_TOO_LONG,
            )
        return lease

    @property
    def replay_rules(self) -> tuple[float | None, bool]:
        """``(replay_window, replayable)``: what a replay sends to SQL as its declared rules."""
        return self.replay_window, self.replayable

    @property
    def limits_flow(self) -> bool:
        """Whether a claim of this queue goes through the flow limits."""
        return (
            self.concurrency is not None
            or self.key_concurrency is not None
            or self.rate is not None
            or self.key_rate is not None
            or self.ordered
        )

    def as_row(self, queue: str) -> tuple[Any, ...]:
        """The parameters of ``drainpipe.ensure_queue_policy_v3``."""
        rate, key_rate = self.rate, self.key_rate
        return (
            queue,
            self.max_payload_bytes,
            self.max_pending,
            self.lease,
            self.max_lease,
            self.max_delay,
            self.max_attempts,
            self.attempt_window,
            self.retention,
            self.encrypt,
            self.replay_window,
            self.replayable,
            self.concurrency,
            self.key_concurrency,
            None if rate is None else rate.n,
            None if rate is None else rate.per,
            None if key_rate is None else key_rate.n,
            None if key_rate is None else key_rate.per,
            self.ordered,
        )


def check_policies(policies: Any, queues: Any) -> dict[str, QueuePolicy]:
    """``Jobs(policies=...)``: a mapping of declared queue → :class:`QueuePolicy`."""
    if policies is None:
        return {}
    if not hasattr(policies, "items"):
        raise TypeError("policies must be a mapping of queue name to QueuePolicy")
    checked: dict[str, QueuePolicy] = {}
    for queue, policy in policies.items():
        if queue not in queues:
            raise ValueError(f'A policy for undeclared queue "{queue}"')
        if not isinstance(policy, QueuePolicy):
            raise TypeError(f'The policy of queue "{queue}" must be a QueuePolicy')
        checked[queue] = policy
    return checked
