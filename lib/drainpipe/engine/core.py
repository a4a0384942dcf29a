"""The lease engine's rules, for the async runner and the sync twin's worker alike: its
arithmetic, and how it reports what went wrong. No I/O, no clock, no event loop.

Every function that needs the time takes ``now`` (an ``asyncio`` loop time, in seconds), so
the runner, the drain route and a test all compute the same answers from the same inputs.
A failure is reported the same way by both twins: the ``LEASE_LOST`` error, the log line
when no ``on_error`` was given, and any exception as a :class:`DrainpipeError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from ..codes import CANCELLED
from ..errors import DrainpipeError
from ..validation import error_text, positive_int, seconds

log = logging.getLogger("drainpipe")

#: Transient claim errors (``errors.TRANSIENT_KINDS``) retried per lane before the run stops.
CLAIM_RETRIES: Final = 3
#: How long ``work`` rides out transient claim errors (a restart, a failover, a pooler
#: restart) before it gives up, in seconds; ``drain`` and the drain route keep their budget.
MAX_OUTAGE: Final = 300.0
#: The longest wait between two claims while riding out an outage: short, so work resumes
#: within seconds of the database coming back (a claim against drainpipe's own pool costs
#: no connection attempt while the database is away: the pool probes on its own interval,
#: see drainpipe.db.outage). It was 30 s: after a failover workers idled for up to 33 s.
OUTAGE_WAIT_CAP: Final = 2.0
#: Heartbeats of job leases never come more often than this (docs/reference.md section 2).
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


# -- a run's options ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The options of one ``work`` or ``drain`` run (or one queue of the drain route),
    checked and normalised by :meth:`checked`, the one place both twins' runs (the async
    ``Worker``, the sync twin's ``SyncWorker``) take them from: a wrong value is the same
    ``validation`` error, with the same message, in either."""

    concurrency: int
    batch: int
    #: seconds, or a callable answering them (the drain route's), each answer checked
    lease: float | Callable[[], float]
    poll_interval: float
    #: never below ``poll_interval``
    max_poll_interval: float
    #: an event (``is_set``, ``wait``) of the twin's kind; the runs check it and ``on_error``
    #: (:func:`check_hooks`), naming that kind
    stop: Any
    on_error: Callable[[BaseException, Any], Any] | None
    all_tenants: bool
    budget: float | None
    #: a time on the run's clock (the event loop's; ``time.monotonic()`` in the sync twin)
    deadline: float | None
    heartbeat_every: float | None
    #: None: transient claim errors are retried :data:`CLAIM_RETRIES` times (``drain``)
    max_outage: float | None
    step_margin: float

    @classmethod
    def checked(
        cls,
        *,
        concurrency: int,
        batch: int,
        lease: float | Callable[[], float],
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        stop: Any = None,
        on_error: Callable[[BaseException, Any], Any] | None = None,
        all_tenants: bool = False,
        budget: float | None = None,
        deadline: float | None = None,
        heartbeat_every: float | None = None,
        max_outage: float | None = None,
        step_margin: float | timedelta = 5.0,
    ) -> RunOptions:
        """The options as given to ``work``/``drain`` (``lease`` already resolved against
        the queue's policy), each checked; the defaults are ``drain``'s."""
        margin = seconds(step_margin, "step_margin")
        if callable(lease):
            checked_lease: float | Callable[[], float] = _checked_lease(lease)
        else:
            checked_lease = seconds(lease, "lease")
            # a margin past half the lease would suspend every step: clamped to half of it
            margin = min(margin, checked_lease / 2)
        poll = seconds(poll_interval, "poll_interval")
        return cls(
            concurrency=positive_int(concurrency, "concurrency"),
            batch=positive_int(batch, "batch"),
            lease=checked_lease,
            poll_interval=poll,
            max_poll_interval=max(poll, seconds(max_poll_interval, "max_poll_interval")),
            stop=stop,
            on_error=on_error,
            all_tenants=all_tenants,
            budget=None if budget is None else seconds(budget, "budget"),
            deadline=deadline,
            heartbeat_every=(
                None
                if heartbeat_every is None
                else seconds(heartbeat_every, "heartbeat_every", minimum=0.001)
            ),
            max_outage=None if max_outage is None else seconds(max_outage, "max_outage"),
            step_margin=margin,
        )


def _checked_lease(lease: Callable[[], float]) -> Callable[[], float]:
    """A lease callable whose every answer is checked: a wrong one is a ``validation``
    error of the claim (which ends the run), not a failure deep inside the SQL call."""
    return lambda: seconds(lease(), "lease")


def check_hooks(stop: Any, on_error: Any, *, event: str, item: str) -> None:
    """``TypeError`` unless ``on_error`` is None or callable, and ``stop`` None or an event
    (anything with ``is_set`` and ``wait``): ``event`` names the twin's kind of event (``"an
    asyncio.Event"``, ``"a threading.Event"``), ``item`` what ``on_error`` is called with."""
    if on_error is not None and not callable(on_error):
        raise TypeError(f"on_error must be callable: on_error(error, {item})")
    if stop is not None and not (
        callable(getattr(stop, "is_set", None)) and callable(getattr(stop, "wait", None))
    ):
        raise TypeError(f"stop must be {event} (or None), not {type(stop).__name__}")


# -- lease ids ------------------------------------------------------------------------------
# A lease id names one hand-out of one item: (item id, attempt, the random token the
# database minted in the hand-out transaction), signed with the service's secret so a
# forged or altered id is refused before any SQL runs. The database fences on all three.

_LEASE_MAC_BYTES: Final = 16
_LEASE_LAYOUT: Final = ">qi16s"  # bigint id, integer attempt, uuid token
_LEASE_BODY_BYTES: Final = 8 + 4 + 16


def _lease_mac(secret: bytes, prefix: str, body: bytes) -> bytes:
    return hmac.new(secret, prefix.encode() + b"\0" + body, hashlib.sha256).digest()[
        :_LEASE_MAC_BYTES
    ]


def mint_lease_id(secret: bytes, prefix: str, item_id: int, attempt: int, token: bytes) -> str:
    """``<prefix>_<base64url>``: the hand-out's id, attempt and 16-byte token, and a MAC."""
    body = struct.pack(_LEASE_LAYOUT, item_id, attempt, token)
    raw = body + _lease_mac(secret, prefix, body)
    return f"{prefix}_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def read_lease_id(secret: bytes, prefix: str, lease_id: str) -> tuple[int, int, bytes] | None:
    """``(item id, attempt, token)`` of a lease id this secret minted, else None (malformed,
    altered, another prefix or another secret's)."""
    head = f"{prefix}_"
    if not isinstance(lease_id, str) or not lease_id.startswith(head) or len(lease_id) > 100:
        return None
    text = lease_id[len(head) :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        return None
    if len(raw) != _LEASE_BODY_BYTES + _LEASE_MAC_BYTES:
        return None
    # one text per lease id: the last character's unused low bits must be zero, or an id
    # with another last character would read as the same lease
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != text:
        return None
    body, mac = raw[:_LEASE_BODY_BYTES], raw[_LEASE_BODY_BYTES:]
    if not hmac.compare_digest(mac, _lease_mac(secret, prefix, body)):
        return None
    item_id, attempt, token = struct.unpack(_LEASE_LAYOUT, body)
    return item_id, attempt, token


# -- reports -------------------------------------------------------------------------------

LEASE_LOST = "LEASE_LOST"


def lease_lost(description: str, reason: str | None = None) -> DrainpipeError:
    """The error ``on_error`` gets for an item whose lease another worker holds now (or,
    with ``reason="CANCELLED"``, whose job an operator cancelled)."""
    if reason == CANCELLED:
        return DrainpipeError(
            "conflict",
            f"{description} was cancelled while it ran; this worker's result is discarded",
            code=CANCELLED,
        )
    return DrainpipeError(
        "conflict",
        f"The lease on {description} was lost (it ran out and the item was claimed again, "
        "or its attempt changed); this worker's result is discarded",
        code=LEASE_LOST,
    )


def log_error(
    description: str,
    error: BaseException,
    *,
    logger: logging.Logger = log,
    fields: dict[str, Any] | None = None,
) -> None:
    """What happens to an error when the caller passed no ``on_error``: logged on ``logger``
    with ``fields`` (queue, job id, attempt ...) and the error's ``code`` as record extras."""
    code = error.code if isinstance(error, DrainpipeError) else None
    extra = {**fields, "code": code} if fields else {"code": code}
    if code in (LEASE_LOST, CANCELLED):
        logger.warning("drainpipe: %s", error, extra=extra)
        return
    logger.error(
        "drainpipe: %s failed: %s", description, error_text(error), exc_info=error, extra=extra
    )


def as_error(exc: BaseException) -> DrainpipeError:
    """``exc`` as a :class:`DrainpipeError` (kind ``unexpected`` unless it is one)."""
    if isinstance(exc, DrainpipeError):
        return exc
    error = DrainpipeError("unexpected", error_text(exc))
    error.__cause__ = exc
    return error
