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

A SQLSTATE means the same thing whichever way it arrived: :func:`sql_error` is the one
table, used by :func:`drainpipe.db.translate_error` (psycopg) and by the PostgREST backends.
drainpipe's own SQL missing (a function, table or schema of ``drainpipe`` does not exist:
42883/42P01/3F000, or PostgREST's PGRST202/PGRST205 naming ``drainpipe``) is ``unexpected``
with code ``NOT_INSTALLED``: an operator's mistake, loud, with what to run.
Expected outcomes (a dedupe hit, a lost lease) are return values, never errors.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from .codes import EVENT_EXPIRED, REPLAY_BLOCKED

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


QUEUE_FULL: Final = "QUEUE_FULL"


def queue_full(queue: str, limit: int) -> DrainpipeError:
    """A queue's ``max_pending`` refuses an enqueue (the client's check and the memory
    backend's answer the same as the database's ``DPQ02``)."""
    return DrainpipeError(
        "rate_limited",
        f'Queue "{queue}" already holds its max_pending of {limit} live jobs',
        code=QUEUE_FULL,
    )


def missing_feature(feature: str, backend: str) -> DrainpipeError:
    """The error for a call whose backend cannot do it (``QueueBackend`` optional methods)."""
    return invalid_request(
        f"{feature} needs a SQL connection; the {backend} backend does not support it"
    )


class Retry(Exception):
    """Raise from a job handler to fail the job and run it again after ``after`` seconds.

    ``code`` is the safe code the attempt records (``RETRY`` without one); an invalid code
    is the handler's bug: ``ValueError`` here, recorded as ``HANDLER_ERROR``."""

    def __init__(
        self, after: float | None = 0, message: str | None = None, *, code: str | None = None
    ) -> None:
        after = 0 if after is None else after
        if after < 0:
            raise ValueError("Retry(after=...) must be >= 0 seconds")
        if code is not None:
            from .codes import valid_code

            if not valid_code(code):
                raise ValueError(
                    f"Retry(code) needs a code matching ^[A-Z][A-Z0-9_]{{0,63}}$, not {code!r}"
                )
        super().__init__(message or f"Retry requested in {after:g} s")
        self.after = after
        self.code = code or "RETRY"


# -- the one translation of database errors ---------------------------------------------

#: ``code`` of the error for drainpipe SQL that is not installed (see :func:`sql_error`).
NOT_INSTALLED: Final = "NOT_INSTALLED"
INSTALL_HINT: Final = (
    "drainpipe's SQL is not installed in this database:"
    " run `drainpipe sql apply` (or `await drainpipe.install(db, modules)`)"
)

# undefined function / table / schema: naming drainpipe, a module that was never applied
MISSING_OBJECT_STATES: Final[frozenset[str]] = frozenset({"42883", "42P01", "3F000"})
# PostgREST's "not in the schema cache" for a function (PGRST202) or a table (PGRST205)
MISSING_OBJECT_POSTGREST_CODES: Final[frozenset[str]] = frozenset({"PGRST202", "PGRST205"})
# The server ended or refused the session: admin/crash shutdown (a restart, a pooler or
# pg_terminate_backend), "the database system is starting up", too many connections.
# Connection failures like 08xxx, so workers retry them instead of stopping.
CONNECTION_LOST_STATES: Final[frozenset[str]] = frozenset({"57P01", "57P02", "57P03", "53300"})

_KIND_BY_SQLSTATE: Final[dict[str, ErrorKind]] = {
    "23505": "conflict",
    "42501": "forbidden",
    "P0001": "raised",
    "57014": "timeout",
    "40001": "serialization",
    "40P01": "serialization",
    **{state: "network" for state in CONNECTION_LOST_STATES},
}


#: The SQLSTATEs of a queue policy's refusals in SQL (sql/migrations/jobs/*_policies) and
#: the kind and code each is answered with, the same as the client's own checks.
POLICY_SQLSTATES: Final[dict[str, tuple[ErrorKind, str]]] = {
    "DPQ01": ("validation", "PAYLOAD_TOO_LARGE"),
    "DPQ02": ("rate_limited", "QUEUE_FULL"),
    "DPQ03": ("invalid_request", "LEASE_TOO_LONG"),
    "DPQ04": ("validation", "SCHEDULE_TOO_FAR"),
}


def check_replay_rules(queue: str, job_id: int, code: str | None) -> None:
    """Raise the 409 (``conflict``, with the code) of a replay its queue's rules refused."""
    if code == EVENT_EXPIRED:
        raise DrainpipeError(
            "conflict",
            f'job {job_id} of queue "{queue}" is past its replay_window:'
            " its event is too old to replay",
            code=code,
        )
    if code == REPLAY_BLOCKED:
        raise DrainpipeError(
            "conflict", f'queue "{queue}" does not allow replays (replayable = false)', code=code
        )


def kind_for_sqlstate(sqlstate: str) -> ErrorKind:
    """The contract's kind for a SQLSTATE (docs/reference.md section 1): 23505 conflict, 42501
    forbidden, P0001 raised, 57014 timeout, 40001/40P01 serialization, 22xxx invalid_input,
    08xxx (and a session the server ended) network, anything else unexpected."""
    kind = _KIND_BY_SQLSTATE.get(sqlstate)
    if kind is not None:
        return kind
    if sqlstate.startswith("22"):
        return "invalid_input"
    if sqlstate.startswith("08"):
        return "network"
    return "unexpected"


def names_drainpipe(message: str) -> bool:
    """Whether an "object does not exist" message is about drainpipe's own schema."""
    return "drainpipe" in message


def not_installed(message: str) -> DrainpipeError:
    """drainpipe's SQL is missing: ``unexpected``, code ``NOT_INSTALLED``, saying what to run
    (the drain route answers it with 503: the deployment is not ready)."""
    return DrainpipeError("unexpected", f"{message} ({INSTALL_HINT})", code=NOT_INSTALLED)


def sql_error(
    sqlstate: str,
    message: str,
    *,
    constraint: str | None = None,
    code: str | None = None,
) -> DrainpipeError:
    """The error for a SQLSTATE, whichever client reported it (psycopg or PostgREST).

    ``constraint`` becomes the ``code`` of a conflict (the contract keeps it); ``code`` is
    the client's own code for every other kind (PostgREST's answer carries one, psycopg's
    does not). Missing drainpipe objects → :func:`not_installed`."""
    policy = POLICY_SQLSTATES.get(sqlstate)
    if policy is not None:
        kind, policy_code = policy
        if kind == "validation":
            return validation_error(message, code=policy_code)
        return DrainpipeError(kind, message, code=policy_code)
    kind = kind_for_sqlstate(sqlstate)
    if kind == "conflict":
        return DrainpipeError("conflict", message, code=constraint or code)
    if sqlstate in MISSING_OBJECT_STATES and names_drainpipe(message):
        return not_installed(message)
    return DrainpipeError(kind, message, code=code)


#: ``code`` of the error for a schema PostgREST does not expose (PGRST106).
SCHEMA_NOT_EXPOSED: Final = "SCHEMA_NOT_EXPOSED"

# PostgREST's own codes that say more than the HTTP status does (and all there is to go by
# through postgrest-py, whose APIError drops the status)
_KIND_BY_POSTGREST_CODE: Final[dict[str, ErrorKind]] = {
    "PGRST000": "network",  # could not connect to the database
    "PGRST001": "network",  # an internal connection error
    "PGRST002": "network",  # the schema cache could not be built (the database is away)
    "PGRST003": "timeout",  # no pooled connection in time
}
_KIND_BY_HTTP_STATUS: Final[dict[int, ErrorKind]] = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    408: "timeout",
    429: "rate_limited",
    504: "timeout",
}
_SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
_CONSTRAINT = re.compile(r'constraint "([^"]+)"')


def postgrest_error(status: int | None, code: str | None, message: str) -> DrainpipeError:
    """The error for a failed PostgREST call (``code`` from its JSON body, ``status`` its
    HTTP status when known): a SQLSTATE goes through :func:`sql_error`, so a database error
    means the same over HTTPS as over psycopg; then PostgREST's own codes; then the status.
    Transient kinds matter: a worker retries claim errors of kind network, timeout,
    serialization and rate_limited, and stops on anything else."""
    if code:
        if not code.startswith("PGRST") and _SQLSTATE.match(code):
            found = _CONSTRAINT.search(message) if code == "23505" else None
            return sql_error(code, message, constraint=found and found.group(1), code=code)
        if code in MISSING_OBJECT_POSTGREST_CODES:
            # "Could not find the function drainpipe.claim_jobs_v1(...) in the schema cache"
            if names_drainpipe(message):
                return not_installed(message)
            return DrainpipeError("unexpected", message, code=code)
        if code == "PGRST106":
            return invalid_request(
                f"{message} (PostgREST does not expose this schema: add it to the exposed"
                " schemas, Supabase: Project Settings → API → Exposed schemas)",
                code=SCHEMA_NOT_EXPOSED,
            )
        kind = _KIND_BY_POSTGREST_CODE.get(code)
        if kind is not None:
            return DrainpipeError(kind, message, code=code)
        if code.startswith("PGRST3"):  # JWT missing, malformed or expired
            return DrainpipeError("unauthorized", message, code=code)
        if status is None and len(code) == 3 and code.isdigit():
            status = int(code)  # postgrest-py puts the status there when the body was not JSON
    kind = "unexpected"
    if status is not None:
        kind = _KIND_BY_HTTP_STATUS.get(status) or ("network" if status >= 500 else "unexpected")
    return DrainpipeError(kind, message, code=code)
