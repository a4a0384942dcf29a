"""Pure checks shared by every public call: names, durations, instants, payloads."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any

from .errors import DrainpipeError, validation_error

QUEUE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,46}$")
MAX_ERROR_TEXT = 4000
# Postgres integer / bigint: a larger Python int would reach SQL as another type, and the
# call would fail as a missing function instead of a validation error
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
# the longest duration Python's timedelta holds (999,999,999 days); a Postgres interval
# holds more, so every duration we accept converts both ways
MAX_SECONDS = float(timedelta.max.days * 86_400)


def check_queue_name(name: Any) -> str:
    # fullmatch: "$" in match() would also accept a name ending in a newline
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
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
        try:
            result = float(value)
        except OverflowError:  # an int beyond any float: as endless as inf
            result = math.inf
    else:
        raise validation_error(
            f"{name} must be a number of seconds or a timedelta",
            [{"message": "Expected seconds", "path": [name]}],
        )
    if not math.isfinite(result) or result < minimum or result > MAX_SECONDS:
        raise validation_error(
            f"{name} must be a finite number of seconds from {minimum:g} to {MAX_SECONDS:g}",
            [{"message": f"Must be from {minimum:g} to {MAX_SECONDS:g}", "path": [name]}],
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


def issue_summary(issues: list[dict[str, Any]], error: Any = "") -> str:
    """The first issue as one line naming its field (``to: Field required``,
    ``items.0.sku: ...``), with how many more there are; the error's text without issues."""
    if not issues:
        return str(error)
    first = issues[0]
    path = ".".join(str(part) for part in first.get("path") or ())
    text = f"{path}: {first['message']}" if path else str(first["message"])
    more = len(issues) - 1
    return text + (f" (and {more} more issue{'s' if more > 1 else ''})" if more else "")


# -- bounds on what reaches an index or a jsonb column ------------------------------------

#: Longest id, key, scope, name, tenant or source (characters). A btree entry holds at most
#: 2704 bytes; 255 characters (up to 1020 UTF-8 bytes) stays far below it, as the
#: idempotency key always has.
MAX_NAME_LENGTH = 255
#: Largest serialised job payload (bytes of JSON, context envelope included).
MAX_PAYLOAD_BYTES = 1_048_576
#: Deepest nesting of arrays and objects in a stored JSON value: orjson's own limit, so
#: every stored value is written and read back by the fast path, far from Python's
#: recursion limit.
MAX_JSON_DEPTH = 254
#: Larger floats are written by orjson with an exponent, which jsonb turns into an integer
#: ("1e+16" is stored as 10000000000000000 and read back as an int).
EXPONENT_FLOAT = 1e16


def text_fault(text: str) -> str | None:
    """Why Postgres text cannot hold ``text`` (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return "holds a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATE
    return None


def check_text(
    value: Any,
    name: str,
    *,
    max_length: int = MAX_NAME_LENGTH,
    allow_empty: bool = False,
    path: list[Any] | None = None,
) -> str:
    """A string Postgres can store and index: at most ``max_length`` characters, no NUL,
    no lone surrogate (and not empty unless ``allow_empty``); ``validation`` otherwise."""
    where = path if path is not None else [name]
    if not isinstance(value, str):
        problem = f"must be a string, not {type(value).__name__}"
    elif not value and not allow_empty:
        problem = "must not be empty"
    elif len(value) > max_length:
        problem = f"must be at most {max_length} characters (it has {len(value)})"
    else:
        fault = text_fault(value)
        if fault is None:
            return value
        problem = fault
    raise validation_error(f"{name} {problem}", [{"message": problem, "path": where}])


def json_fault(value: Any) -> tuple[list[Any], str] | None:
    """The path to and the reason for the first part of ``value`` that JSON in a jsonb
    column cannot carry exactly, or None. Slow (a walk): only for values the fast
    serialisation flagged."""
    return _walk(value, [], 0)


def _walk(value: Any, path: list[Any], depth: int) -> tuple[list[Any], str] | None:
    if isinstance(value, str):
        fault = text_fault(value)
        return None if fault is None else (path, f"a string that {fault}")
    if isinstance(value, float):
        if not math.isfinite(value):
            return path, f"{value!r} is not a JSON number"
        return None
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_JSON_DEPTH:
            return path, f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str):
                    fault = text_fault(key)
                    if fault is not None:
                        return [*path, key], f"a key that {fault}"
                elif not (key is None or isinstance(key, bool | int | float)):
                    return [*path, repr(key)], f"a {type(key).__name__} key is not JSON"
                elif isinstance(key, float) and not math.isfinite(key):
                    return [*path, repr(key)], f"the key {key!r} is not JSON"
                found = _walk(item, [*path, key], depth + 1)
                if found is not None:
                    return found
        else:
            for index, item in enumerate(value):
                found = _walk(item, [*path, index], depth + 1)
                if found is not None:
                    return found
        return None
    return path, f"a {type(value).__name__} is not a JSON value"


def json_error(fault: tuple[list[Any], str], name: str) -> DrainpipeError:
    """The ``validation`` error for a :func:`json_fault`: ``name`` and the path in the
    message and the issue, so the caller sees which value to fix."""
    path, reason = fault
    where = "".join(f"[{part!r}]" for part in path)
    return validation_error(
        f"{name}{where} cannot be stored as JSON: {reason}",
        [{"message": reason, "path": [name, *path]}],
    )


def has_non_finite(value: Any) -> bool:
    """Does ``value`` hold a NaN or an infinity anywhere? Cheap (type checks only, no
    paths): it runs when orjson's output holds a ``null``, which is what it writes for
    them, so a payload with a None is not sent down the slow careful path for nothing."""
    if isinstance(value, float):
        return not _isfinite(value)
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return False
    for item in items:
        kind = type(item)
        if kind is float:
            if not _isfinite(item):
                return True
        elif kind is str or kind is int or kind is bool or item is None:
            continue
        elif has_non_finite(item):
            return True
    return False


_isfinite = math.isfinite


def surrogate_fault(value: Any, depth: int = 0) -> tuple[list[Any], str] | None:
    """The path to the first key or string holding a lone surrogate (or to where nesting
    passes :data:`MAX_JSON_DEPTH`), in a value of any Python types (other objects are
    skipped), or None."""
    if isinstance(value, str):
        return ([], f"a string that {_SURROGATE}") if _has_surrogate(value) else None
    if isinstance(value, dict | list | tuple | set | frozenset) and depth >= MAX_JSON_DEPTH:
        return [], f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _has_surrogate(key):
                return [key], f"a key that {_SURROGATE}"
            found = surrogate_fault(item, depth + 1)
            if found is not None:
                return [key, *found[0]], found[1]
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            found = surrogate_fault(item, depth + 1)
            if found is not None:
                return [index, *found[0]], found[1]
    return None


_SURROGATE = "holds a lone surrogate (not valid Unicode)"


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
