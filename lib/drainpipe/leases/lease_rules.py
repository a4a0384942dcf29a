"""What both lease twins share: the answer of ``with_lease`` and the checks of a key, a
scope and a length (:mod:`drainpipe.leases` is the async API, ``drainpipe.sync.leases`` its
generated sync twin)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from ..errors import invalid_request, validation_error
from ..validation import MAX_NAME_LENGTH, aware, text_fault
from ..validation import seconds as as_seconds

T = TypeVar("T")
MAX_LEASE_KEY = MAX_NAME_LENGTH


@dataclass(frozen=True, slots=True)
class LeaseOutcome(Generic[T]):
    """``acquired`` is False when someone else held the key (``fn`` did not run, ``value``
    is None); otherwise ``value`` is what ``fn`` returned."""

    acquired: bool
    value: T | None = None


def _instant(now: Callable[[], datetime] | None) -> datetime | None:
    """The caller's current instant for ``p_now`` (None: the database's clock)."""
    return None if now is None else aware(now(), "now()")


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise invalid_request(f"A lease key must be a non-empty string, not {key!r}")
    return _storable(key, "A lease key")


def _check_scope(scope: Any) -> str:
    if not isinstance(scope, str):
        raise invalid_request(f"A lease scope must be a string, not {type(scope).__name__}")
    return _storable(scope, "A lease scope")


def _storable(text: str, what: str) -> str:
    """``text`` when Postgres can index it: at most 255 characters (a btree entry holds 2704
    bytes), no NUL, no lone surrogate; else ``invalid_request``, as for every lease key."""
    if len(text) > MAX_LEASE_KEY:
        raise invalid_request(f"{what} must be at most {MAX_LEASE_KEY} characters")
    fault = text_fault(text)
    if fault is not None:
        raise invalid_request(f"{what} {fault}")
    return text


def _positive_seconds(value: Any) -> float:
    result = as_seconds(value, "seconds")
    if result <= 0:
        raise validation_error(
            "seconds must be more than 0", [{"message": "Must be > 0", "path": ["seconds"]}]
        )
    return result
