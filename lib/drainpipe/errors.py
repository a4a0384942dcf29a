"""The one error type drainpipe raises, and the kinds it comes in.

    DrainpipeError(kind, status)
    ├── validation        422  a payload, cron, zone or option failed its checks (``issues`` set)
    ├── invalid_request   400  the call itself is wrong: unknown queue, missing feature, bad key
    ├── unauthorized      401  missing or wrong secret / signature
    ├── forbidden         403  Postgres said permission denied (42501)
    ├── not_found         404
    ├── conflict          409  unique violation (23505) or a key already in use
    ├── serialization     409  40001 / 40P01: retry the transaction
    ├── timeout           504  57014 statement timeout
    ├── network           503  08xxx, connection refused or dropped
    ├── rate_limited      429
    ├── raised            400  a plain ``RAISE EXCEPTION`` (P0001) in a SQL function
    ├── invalid_input     400  22xxx: bad value for a Postgres type
    └── unexpected        500  anything else

Postgres exceptions are translated in exactly one place, :func:`drainpipe.db.translate_error`.
Expected outcomes (a dedupe hit, a lost lease) are return values, never errors.
"""

from __future__ import annotations

from typing import Any, Final, Literal

ErrorKind = Literal[
    "validation",
    "invalid_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "conflict",
    "serialization",
    "timeout",
    "network",
    "rate_limited",
    "raised",
    "invalid_input",
    "unexpected",
]

STATUS_BY_KIND: Final[dict[str, int]] = {
    "validation": 422,
    "invalid_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "serialization": 409,
    "timeout": 504,
    "network": 503,
    "rate_limited": 429,
    "raised": 400,
    "invalid_input": 400,
    "unexpected": 500,
}

#: Kinds a worker may retry after waiting: the database was briefly away or busy.
TRANSIENT_KINDS: Final[frozenset[str]] = frozenset(
    {"network", "timeout", "serialization", "rate_limited"}
)


class DrainpipeError(Exception):
    """An error with a ``kind`` (see the module docstring) and its HTTP ``status``.

    ``code`` is a stable machine-readable code (``IDEMPOTENCY_KEY_IN_USE``, a constraint
    name for ``conflict``); ``issues`` lists what failed validation, each a dict with
    ``message`` and ``path``.
    """

    kind: ErrorKind
    status: int
    code: str | None
    issues: list[dict[str, Any]] | None

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        code: str | None = None,
        issues: list[dict[str, Any]] | None = None,
        status: int | None = None,
    ) -> None:
        if kind not in STATUS_BY_KIND:
            raise ValueError(f"Unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.status = status if status is not None else STATUS_BY_KIND[kind]
        self.code = code
        self.issues = issues

    @property
    def message(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        extra = f", code={self.code!r}" if self.code else ""
        return f"DrainpipeError(kind={self.kind!r}, {str(self)!r}{extra})"


def invalid_request(message: str, *, code: str | None = None) -> DrainpipeError:
    return DrainpipeError("invalid_request", message, code=code)


def validation_error(
    message: str, issues: list[dict[str, Any]] | None = None, *, code: str | None = None
) -> DrainpipeError:
    return DrainpipeError(
        "validation", message, code=code, issues=issues or [{"message": message, "path": []}]
    )


def missing_feature(feature: str, backend: str) -> DrainpipeError:
    """The error for a call whose backend cannot do it (``QueueBackend`` optional methods)."""
    return invalid_request(
        f"{feature} needs a SQL connection; the {backend} backend does not support it"
    )


class Retry(Exception):
    """Raise from a job handler to fail the job and run it again after ``after`` seconds."""

    def __init__(self, after: float = 0, message: str | None = None) -> None:
        if after < 0:
            raise ValueError("Retry(after=...) must be >= 0 seconds")
        super().__init__(message or f"Retry requested in {after:g} s")
        self.after = after
