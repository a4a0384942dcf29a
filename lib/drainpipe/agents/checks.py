"""The checks of what agents send: query parameters, bodies and frames all answer 400 with a
stable code when wrong (docs/reference.md section 11: ``max`` 1..10, ``wait`` 0..30, ...)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..errors import DrainpipeError
from ..validation import MAX_NAME_LENGTH, text_fault

ORDERS: Final = ("fifo", "lifo", "priority")
ACK_MODES: Final = ("manual", "pickup")
MAX_EVENTS: Final = 10
MAX_WAIT: Final = 30.0
MAX_PEEK: Final = 200
MAX_LEASE: Final = 3600.0
MAX_ERROR_CHARS: Final = 4000
MAX_OUTCOME_BYTES: Final = 65536
#: What a long poll leaves of the function's budget to answer in (seconds).
RESERVE: Final = 1.0

INVALID_PARAMETER: Final = "INVALID_PARAMETER"
ACK_MODE_NOT_ALLOWED: Final = "ACK_MODE_NOT_ALLOWED"
LEASE_LOST: Final = "LEASE_LOST"
PULL_CONSUMED: Final = "PULL_CONSUMED"
INBOX_NOT_FOUND: Final = "INBOX_NOT_FOUND"
EVENT_NOT_FOUND: Final = "EVENT_NOT_FOUND"
INBOX_FORBIDDEN: Final = "INBOX_FORBIDDEN"
CURSOR_INVALID: Final = "CURSOR_INVALID"


def bad_parameter(name: str, message: str) -> DrainpipeError:
    """A 400 naming the parameter (kind ``validation``, so ``issues`` travel with it)."""
    return DrainpipeError(
        "validation",
        message,
        code=INVALID_PARAMETER,
        issues=[{"message": message, "path": [name]}],
        status=400,
    )


def whole_number(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit() or len(text) > 12:
            raise bad_parameter(name, f"{name} must be a whole number from {low} to {high}")
        value = int(text)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise bad_parameter(name, f"{name} must be a whole number from {low} to {high}")
    return value


def number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad_parameter(name, f"{name} must be a number from {low:g} to {high:g}") from None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise bad_parameter(name, f"{name} must be a number from {low:g} to {high:g}")
    return float(value)


def choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise bad_parameter(name, f"{name} must be one of {', '.join(allowed)}")
    return str(value)


def optional_name(value: Any, name: str) -> str | None:
    """A filter or key: None, or text of 1..255 characters Postgres can store."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_NAME_LENGTH
        or text_fault(value) is not None
    ):
        raise bad_parameter(name, f"{name} must be text of 1 to {MAX_NAME_LENGTH} characters")
    return value


def lease_text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise bad_parameter("lease_id", "lease_id must be the lease id the event was handed with")
    return value


def error_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or text_fault(value) is not None:
        raise bad_parameter("error", "error must be text")
    return value[:MAX_ERROR_CHARS]


def path_parts(value: Any, name: str) -> list[str]:
    """``"data.severity"`` → ``["data", "severity"]``."""
    if not isinstance(value, str) or not value or len(value) > 1000 or text_fault(value):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    parts = value.split(".")
    if any(not part for part in parts):
        raise bad_parameter(name, f"{name} must be a dotted body path such as data.severity")
    return parts


Filters = tuple[str | None, str | None, str | None, str | None]


def filters_of(type: Any, source: Any, subscription: Any, correlation: Any) -> Filters:
    return (
        optional_name(type, "type"),
        optional_name(source, "source"),
        optional_name(subscription, "subscription"),
        optional_name(correlation, "correlation"),
    )


def view_paths_of(value: Any) -> dict[str, list[str]] | None:
    """``["data.amount"]`` (keys are the paths) or ``{"amount": "data.amount"}``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Iterable):
        pairs = [(path, path) for path in value]
    else:
        raise bad_parameter("view_paths", "view_paths must be a list of body paths or a mapping")
    paths: dict[str, list[str]] = {}
    for name, path in pairs:
        if not isinstance(name, str) or not name or text_fault(name) is not None:
            raise bad_parameter("view_paths", "view_paths names must be text")
        paths[name] = path_parts(path, "view_paths")
    if not paths or len(paths) > 100:
        raise bad_parameter("view_paths", "view_paths must name 1 to 100 paths")
    return paths
