"""The Job Inbox's error codes (docs/reference.md §10), shared by the app's routing and its
job routes, with the two Problem kinds they most often travel with."""

from __future__ import annotations

from ..errors import DrainpipeError

ADMIN_REQUIRED = "ADMIN_REQUIRED"
UNAUTHORIZED = "UNAUTHORIZED"
LIMIT_TOO_LARGE = "LIMIT_TOO_LARGE"
LIMIT_INVALID = "LIMIT_INVALID"
STATE_INVALID = "STATE_INVALID"
QUEUE_UNKNOWN = "QUEUE_UNKNOWN"
FILTER_INVALID = "FILTER_INVALID"
QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
JOB_NOT_FOUND = "JOB_NOT_FOUND"
ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
JOB_NOT_CANCELLABLE = "JOB_NOT_CANCELLABLE"
JOB_NOT_DEAD = "JOB_NOT_DEAD"
JOB_ALREADY_REPLAYED = "JOB_ALREADY_REPLAYED"
CURSOR_INVALID = "CURSOR_INVALID"


def not_found(message: str, code: str) -> DrainpipeError:
    return DrainpipeError("not_found", message, code=code)


def conflict(message: str, code: str) -> DrainpipeError:
    return DrainpipeError("conflict", message, code=code)
