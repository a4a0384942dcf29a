"""How the lease engine reports what went wrong, for the async runner and the sync twin's
worker alike: the ``LEASE_LOST`` error, the log line when no ``on_error`` was given, and
any exception as a :class:`DrainpipeError`. No I/O, no event loop."""

from __future__ import annotations

import logging
from typing import Any

from ..codes import CANCELLED
from ..errors import DrainpipeError
from ..validation import error_text

log = logging.getLogger("drainpipe")

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
