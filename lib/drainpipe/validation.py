"""Pure checks shared by every public call: names, durations, instants, payloads."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any

from .errors import validation_error

QUEUE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,46}$")
MAX_ERROR_TEXT = 4000
# Postgres integer / bigint: a larger Python int would reach SQL as another type, and the
# call would fail as a missing function instead of a validation error
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1


def check_queue_name(name: Any) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise ValueError(
            f"Queue {name!r}: queue names are lowercase letters, digits and underscores, "
            "starting with a letter or underscore (at most 47 characters)"
        )
    return name


def seconds(value: Any, name: str, *, minimum: float = 0.0) -> float:
    """A duration in seconds from an int, a float or a timedelta; ``validation`` otherwise."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        raise validation_error(
            f"{name} must be a number of seconds or a timedelta",
            [{"message": "Expected seconds", "path": [name]}],
        )
    if not math.isfinite(result) or result < minimum:
        raise validation_error(
            f"{name} must be a finite number of seconds >= {minimum:g}",
            [{"message": f"Must be >= {minimum:g}", "path": [name]}],
        )
    return result


def aware(value: Any, name: str) -> datetime:
    """A timezone-aware datetime; a naive one is a validation error (it has no instant)."""
    if not isinstance(value, datetime):
        raise validation_error(
            f"{name} must be a datetime", [{"message": "Expected a datetime", "path": [name]}]
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise validation_error(
            f"{name} must be timezone-aware (a naive datetime names no instant)",
            [{"message": "Naive datetime", "path": [name]}],
        )
    return value


def positive_int(value: Any, name: str, *, minimum: int = 1, maximum: int = INT4_MAX) -> int:
    """An int in ``[minimum, maximum]`` (default: what a Postgres ``integer`` holds)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or value > maximum:
        raise validation_error(
            f"{name} must be an integer from {minimum} to {maximum}, not {value!r}",
            [{"message": f"Must be an integer from {minimum} to {maximum}", "path": [name]}],
        )
    return value


def error_text(error: Any) -> str:
    """The text stored as ``last_error``: an exception's message, cut to 4000 characters.

    NUL characters and lone surrogates (which Postgres text cannot hold) are replaced, so
    recording a failure never fails because of what the error message contains.
    """
    if isinstance(error, BaseException):
        text = str(error) or type(error).__name__
    elif isinstance(error, str):
        text = error
    else:
        message = getattr(error, "message", None)
        text = str(message) if message is not None else str(error)
    return storable_text(text[:MAX_ERROR_TEXT])


def storable_text(text: str) -> str:
    """``text`` with what a Postgres text value cannot hold (NUL, lone surrogates) replaced."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        # a lone surrogate cannot be encoded as UTF-8: it becomes "?"
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def pydantic_issues(exc: Any) -> list[dict[str, Any]]:
    return [
        {"message": item.get("msg", "Invalid value"), "path": list(item.get("loc", ()))}
        for item in exc.errors(include_url=False)
    ]
