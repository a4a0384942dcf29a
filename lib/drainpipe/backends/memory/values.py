"""Checks and conversions the memory backend shares between jobs and schedules, as the
SQL functions make them."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from ...errors import DrainpipeError, invalid_request

_QUEUE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,46}$")


def _invalid_input(message: str) -> DrainpipeError:
    # what the SQL functions raise (SQLSTATE 22xxx) for the same argument
    return DrainpipeError("invalid_input", message)


def flow_unsupported(what: str) -> DrainpipeError:
    """The memory backend's answer to flow control: ``invalid_request`` naming ``what``."""
    return invalid_request(
        f"{what}: flow control is enforced by Postgres' claim, and the memory backend does"
        " not enforce it; test it against Postgres, and give the memory backend policies"
        " without flow limits (drainpipe.testing.without_flow_control)"
    )


def _check_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
        raise _invalid_input(
            f'Invalid queue name "{queue}": lowercase letters, digits and underscores, at most 47'
        )
    return queue


def _check_max_attempts(max_attempts: Any) -> int:
    if (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts < 2**31
    ):
        raise _invalid_input(f"max_attempts must be at least 1, not {max_attempts}")
    return max_attempts


def _to_json(value: Any) -> str:
    """The stored form of a payload: JSON text, so every read hands out a fresh copy and a
    value Postgres' jsonb would refuse is refused here too. A job's priority is refused
    (see policies.py: the memory backend claims in eligibility order only)."""
    if isinstance(value, dict) and value.get("$dp") == 1 and value.get("priority"):
        raise flow_unsupported(f"priority={value['priority']!r}")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise _invalid_input(f"The payload is not a JSON value: {exc}") from exc
    if "\\u0000" in text:
        raise _invalid_input("The payload contains a NUL character, which jsonb cannot hold")
    return text


def _later(moment: datetime, seconds: float | None) -> datetime:
    """``moment`` plus ``seconds`` (None and negative count as 0, as in SQL)."""
    try:
        return moment + timedelta(seconds=max(float(seconds or 0), 0.0))
    except (OverflowError, ValueError) as exc:
        raise _invalid_input(f"{seconds!r} seconds is out of range") from exc


def _floor_ms(moment: datetime) -> datetime:
    # schedules are stored and compared at millisecond precision, as in SQL
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _floor_ms_or_none(moment: datetime | None) -> datetime | None:
    return None if moment is None else _floor_ms(moment)
