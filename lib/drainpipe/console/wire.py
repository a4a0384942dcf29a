"""What :class:`drainpipe.ManagementClient` and its sync twin share: the checked options,
the paths and parameters they send, and how a Problem answer becomes the
:class:`~drainpipe.DrainpipeError` of the server's kind, status and code. No I/O."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote

from ..errors import STATUS_BY_KIND, DrainpipeError, ErrorKind

_KIND_BY_STATUS: dict[int, ErrorKind] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    422: "validation",
    429: "rate_limited",
    503: "network",
    504: "timeout",
}


def problem_error(response: Any) -> DrainpipeError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    kind = body.get("kind")
    if kind not in STATUS_BY_KIND:
        kind = _KIND_BY_STATUS.get(response.status_code, "unexpected")
    message = body.get("detail") or body.get("title") or f"HTTP {response.status_code}"
    code = body.get("code")
    issues = body.get("issues")
    error = DrainpipeError(
        cast(ErrorKind, kind),
        str(message),
        code=code if isinstance(code, str) else None,
        issues=issues if isinstance(issues, list) else None,
        status=response.status_code,
    )
    meta = body.get("meta")
    if isinstance(meta, dict):  # e.g. BULK_COUNT_CHANGED's {"count": n}
        error.meta = meta  # type: ignore[attr-defined]
    return error


def retryable(error: DrainpipeError) -> bool:
    return error.status >= 500 or error.code == "IDEMPOTENCY_KEY_IN_USE"


def check_client(base_url: Any, token: Any, retries: Any) -> tuple[str, dict[str, str]]:
    """The base URL without a trailing slash and the headers every request carries."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError("base_url must be an http(s) URL")
    if not isinstance(token, str) or not token.strip():
        raise ValueError("token must be a non-empty string")
    if not isinstance(retries, int) or retries < 0:
        raise ValueError("retries must be an integer >= 0")
    headers = {"Authorization": f"Bearer {token.strip()}", "Accept": "application/json"}
    return base_url.rstrip("/"), headers


def job_path(queue: str, job_id: Any) -> str:
    if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id < 0:
        raise DrainpipeError("validation", "job_id must be a non-negative integer")
    return f"/jobs/{quote(queue, safe='')}/{job_id}"


def list_params(
    queue: str | None, state: str | None, tenant: str | None, limit: int
) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit}
    for name, value in (("queue", queue), ("state", state), ("tenant", tenant)):
        if value is not None:
            params[name] = value
    return params


def queue_path(queue: str, action: str) -> str:
    if not isinstance(queue, str) or not queue:
        raise DrainpipeError("validation", "queue must be a non-empty string")
    return f"/queues/{quote(queue, safe='')}/{action}"


def bulk_body(where: Any, expected: Any) -> dict[str, Any]:
    """A bulk call's body: ``{"filter": {queue, state, tenant, code, since, until},
    "expected": n}`` (datetimes sent as ISO 8601)."""
    if not isinstance(where, dict):
        raise DrainpipeError("validation", "filter must be a dict")
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise DrainpipeError("validation", "expected must be a non-negative integer")
    plain = {
        key: value.isoformat() if hasattr(value, "isoformat") else value
        for key, value in where.items()
        if value is not None
    }
    return {"filter": plain, "expected": expected}


def answer_of(body: Any) -> tuple[Any, Any]:
    """``(data, meta)`` of a successful answer."""
    body = cast(dict[str, Any], body) if isinstance(body, dict) else {}
    return body.get("data"), body.get("meta") or {}
