"""A drain that cannot work at all: the database never answered, drainpipe's SQL is
missing, or (over PostgREST) its API schema is not exposed. The route answers it as a 503 Problem with ``"more": false`` instead of a 200
report that a cron caller or an uptime monitor would read as success."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..errors import (
    INSTALL_HINT,
    MISSING_OBJECT_POSTGREST_CODES,
    MISSING_OBJECT_STATES,
    NOT_INSTALLED,
    SCHEMA_NOT_EXPOSED,
    DrainpipeError,
)
from ..http import (
    PROBLEM_CONTENT_TYPE,
    ProblemFormatter,
    Response,
    problem_body,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger("drainpipe")


# undefined table / function / schema, and PostgREST's "not in the schema cache" for both
_MISSING_SQL = MISSING_OBJECT_STATES | MISSING_OBJECT_POSTGREST_CODES


def missing_sql(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) says one of drainpipe's SQL objects
    (schema ``drainpipe``, its functions, pgmq's tables) does not exist."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; never loop on a cycle
        if seen is None:
            return False
        code = seen.code if isinstance(seen, DrainpipeError) else None
        if code == NOT_INSTALLED:
            return True
        state = getattr(seen, "sqlstate", None) or code
        if state in _MISSING_SQL:
            text = str(seen)
            if "drainpipe" in text or "pgmq" in text:
                return True
        seen = seen.__cause__ or seen.__context__
    return False


class DrainUnavailable(DrainpipeError):
    """A drain that could not work at all: the database never answered (kind
    ``network``), or drainpipe's SQL is missing (status 503, code ``NOT_INSTALLED``). The
    route answers it as a 503 Problem with ``"more": false``; the cause is chained and
    logged. Raised by :meth:`DrainRoute.run`."""

    @classmethod
    def from_cause(cls, exc: BaseException) -> DrainUnavailable | None:
        """The failure ``exc`` means when nothing of the drain can work; None when it is
        one source's failure."""
        if missing_sql(exc):
            failure = cls(
                "unexpected",
                str(exc) if INSTALL_HINT in str(exc) else f"{exc} ({INSTALL_HINT})",
                code=NOT_INSTALLED,
                status=503,
            )
        elif isinstance(exc, DrainpipeError) and exc.code == SCHEMA_NOT_EXPOSED:
            # over PostgREST: the API schema is not exposed yet, a set-up step like the SQL
            failure = cls("invalid_request", str(exc), code=SCHEMA_NOT_EXPOSED, status=503)
        elif isinstance(exc, DrainpipeError) and exc.kind == "network":
            failure = cls("network", f"The database cannot be reached: {exc}")
        else:
            return None
        failure.__cause__ = exc
        return failure

    def body(self, instance: str | None = None) -> dict[str, Any]:
        """The Problem body: RFC 9457 members plus ``more: false`` (and ``hint``)."""
        body = problem_body(self, instance)
        if self.code == NOT_INSTALLED:
            body["title"] = "drainpipe's SQL is not installed"
            body["detail"] = str(self)
            body["hint"] = INSTALL_HINT
        elif self.code == SCHEMA_NOT_EXPOSED:
            body["title"] = "PostgREST does not expose drainpipe's API schema"
            body["detail"] = str(self)
        elif self.kind == "network":
            # the cause may name hosts: it goes to the log, not to the caller
            body["detail"] = "The drain route could not reach its database; see the logs"
        body["more"] = False
        return body

    def response(self, instance: str, problem: ProblemFormatter | None) -> Response:
        body = self.body(instance)
        if problem is not None:
            body = problem(body, self)
        return Response(
            self.status,
            json.dumps(body, separators=(",", ":"), default=str).encode(),
            content_type=PROBLEM_CONTENT_TYPE,
        )
