"""Jobs over PostgREST: the ``pgmq_public`` RPCs that Supabase's "Expose Queues via
PostgREST" switch creates, for functions that have no direct database connection.

Two ways in, both imported lazily so ``import drainpipe`` stays cheap:

- a supabase client: ``PgmqPublicBackend(client)`` (what ``Jobs(client, ...)`` does);
  ``supabase`` itself costs ~0.5 s to import, so it is never needed otherwise;
- a project URL and service-role key, spoken to with httpx directly:
  ``PgmqPublicBackend.from_url(url, key)`` / ``PgmqPublicBackend(url=url, key=key)``.

What PostgREST cannot do here: there are no leases to fence (``leases = False``), so
``complete`` archives without checking the attempt, ``fail`` leaves the message to reappear
when its lease ends, ``extend`` is a no-op returning False, and dedupe keys, dead-letter
listing, replay, stats and schedules are missing (``Jobs`` raises ``invalid_request``).
Each message is stored as ``{"payload": ..., "max_attempts": n}``, the same layout the SQL
backend's pgmq storage uses, so both can work the same queue.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from ..context import unwrap_payload
from ..db import dump_json
from ..errors import (
    MISSING_OBJECT_POSTGREST_CODES,
    DrainpipeError,
    ErrorKind,
    missing_feature,
    postgrest_error,
)
from ..models import DedupeMode, FailOutcome, Job

if TYPE_CHECKING:
    import httpx

SCHEMA = "pgmq_public"
DEFAULT_MAX_ATTEMPTS = 5


def _transport_error(fn: str, exc: BaseException) -> DrainpipeError | None:
    """A connection or timeout failure (httpx, sockets) as network/timeout, else None."""
    import asyncio

    import httpx

    if isinstance(exc, httpx.TimeoutException | asyncio.TimeoutError | TimeoutError):
        return DrainpipeError("timeout", f"{SCHEMA}.{fn}: request timed out ({exc!r})")
    if isinstance(exc, httpx.TransportError | OSError):
        return DrainpipeError("network", f"{SCHEMA}.{fn}: {str(exc) or type(exc).__name__}")
    return None


def _rpc_error(
    fn: str, status: int | None, body: Any, *, kind: ErrorKind | None = None
) -> DrainpipeError:
    """A PostgREST error body ``{code, message, details, hint}`` (or anything else) → error
    (of ``kind`` when given, else the kind its code and status say)."""
    if isinstance(body, Mapping):
        code = body.get("code")
        code = None if code is None else str(code)
        message = str(body.get("message") or f"HTTP {status}")
        if body.get("details"):
            message += f" ({body['details']})"
    else:
        code = None
        message = str(body) if body not in (None, "") else f"HTTP {status}"
    if len(message) > 500:  # a proxy's HTML error page says little past its start
        message = message[:500] + "…"
    text = f"{SCHEMA}.{fn}: {message}"
    if kind is not None:
        return DrainpipeError(kind, text, code=code)
    if code == "42P01" and "pgmq.q_" in message:
        text += " (the queue does not exist: create it with pgmq.create or in the dashboard)"
    elif code in MISSING_OBJECT_POSTGREST_CODES and SCHEMA in message:
        text += ' (turn on Supabase\'s "Expose Queues via PostgREST" to create pgmq_public)'
    return postgrest_error(status, code, text)


def _checked(fn: str, body: Any) -> Any:
    """A 2xx result, unless it is an error body: no ``pgmq_public`` function returns a
    JSON object, so ``{"message": ...}`` (a gateway or an RPC wrapper reporting a failure
    with 200) is that failure, with the kind its ``code`` says."""
    if isinstance(body, Mapping) and "message" in body and "msg_id" not in body:
        raise _rpc_error(fn, None, body)  # the kind comes from its code; no code: unexpected
    return body


def _malformed(fn: str, what: str, data: Any) -> DrainpipeError:
    shown = repr(data)
    if len(shown) > 200:
        shown = shown[:200] + "…"
    return DrainpipeError("unexpected", f"{SCHEMA}.{fn}: expected {what}, got {shown}")


def _message_id(fn: str, value: Any) -> int:
    """A message id: a JSON integer, or its digits as a string (bigints past 2**53)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise _malformed(fn, "a message id", value)


def _flag(fn: str, data: Any) -> bool:
    """A boolean from ``true`` or ``[true]``; anything else is not an answer to trust."""
    value = _first(fn, data)
    if not isinstance(value, bool):
        raise _malformed(fn, "true or false", data)
    return value


def _instant(value: Any) -> datetime:
    """A timestamptz from JSON as an aware datetime (a naive one is read as UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.now(UTC)


def _first(fn: str, data: Any) -> Any:
    """A scalar from a scalar or ``setof`` result (PostgREST answers ``true`` or ``[true]``)."""
    if isinstance(data, list):
        if not data:
            raise DrainpipeError("unexpected", f"{SCHEMA}.{fn}: returned no rows")
        return data[0]
    return data


class PgmqPublicBackend:
    """Jobs through Supabase's ``pgmq_public`` PostgREST functions (no leases, no dedupe).

    ``PgmqPublicBackend(client)`` takes a supabase client (``supabase.AsyncClient``; a sync
    client works but blocks the loop); ``PgmqPublicBackend(url=..., key=...)`` talks to
    ``{url}/rest/v1/rpc/<fn>`` with httpx, ``key`` being the service-role key. ``url`` is
    the project URL (a trailing ``/rest/v1`` is accepted). ``timeout`` is per request, in
    seconds; ``http_client`` lets you share an ``httpx.AsyncClient`` (you then close it).
    Queues must already exist (create them in the Supabase dashboard or with ``pgmq.create``).
    """

    api_version: ClassVar[int] = 1
    name = "pgmq_public"
    leases = False

    def __init__(
        self,
        client: Any = None,
        *,
        url: str | None = None,
        key: str | None = None,
        timeout: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if (client is None) == (url is None):
            raise TypeError("PgmqPublicBackend needs either a supabase client or url= and key=")
        self.client = client
        self._rpc_client: Any = None
        self.rest_url: str | None = None
        self._headers: dict[str, str] = {}
        self._http = http_client
        self._owns_http = http_client is None
        self.timeout = timeout
        if url is not None:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError("url must be an http(s) URL such as https://<project>.supabase.co")
            if not isinstance(key, str) or not key:
                raise ValueError("key must be the service-role key (a non-empty string)")
            base = url.rstrip("/")
            self.rest_url = base if base.endswith("/rest/v1") else base + "/rest/v1"
            self._headers = {
                "apikey": key,
                "Authorization": f"Bearer {key}",
                "Accept-Profile": SCHEMA,
                "Content-Profile": SCHEMA,
                "Content-Type": "application/json",
                "Accept": "application/json",
            }

    @classmethod
    def from_url(
        cls,
        url: str,
        key: str,
        *,
        timeout: float = 30.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> PgmqPublicBackend:
        """A backend that POSTs to ``{url}/rest/v1/rpc/<fn>`` with httpx (no supabase import)."""
        return cls(url=url, key=key, timeout=timeout, http_client=http_client)

    async def aclose(self) -> None:
        """Close the httpx client this backend created (a supabase client is left alone)."""
        if self._http is not None and self._owns_http:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> PgmqPublicBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- transport ------------------------------------------------------------------------

    async def rpc(self, fn: str, params: Mapping[str, Any]) -> Any:
        """Call ``pgmq_public.<fn>`` and return its JSON result; failures raise
        :class:`DrainpipeError` whose message starts with ``pgmq_public.<fn>:``."""
        if self.rest_url is not None:
            return await self._rpc_http(fn, params)
        return await self._rpc_client_call(fn, params)

    async def _rpc_http(self, fn: str, params: Mapping[str, Any]) -> Any:
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        try:
            # drainpipe's checked JSON (floats >= 1e16 keep their ".0", NaN is refused)
            # rather than httpx's json.dumps
            response = await self._http.post(
                f"{self.rest_url}/rpc/{fn}",
                content=dump_json(dict(params), "params"),
                headers=self._headers,
            )
        except httpx.HTTPError as exc:
            raise (_transport_error(fn, exc) or _rpc_error(fn, None, str(exc))) from exc
        try:
            body = response.json() if response.content else None
        except ValueError:
            if not response.is_success:
                raise _rpc_error(fn, response.status_code, response.text) from None
            # a proxy or maintenance page answering 2xx: its text is no result of ours
            raise _rpc_error(fn, response.status_code, response.text, kind="unexpected") from None
        if not response.is_success:
            raise _rpc_error(fn, response.status_code, body)
        return _checked(fn, body)

    async def _rpc_client_call(self, fn: str, params: Mapping[str, Any]) -> Any:
        try:
            if self._rpc_client is None:
                # one schema-bound client, sharing the supabase client's HTTP session
                self._rpc_client = self.client.schema(SCHEMA)
            result = self._rpc_client.rpc(fn, dict(params)).execute()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            transport = _transport_error(fn, exc)
            if transport is not None:
                raise transport from exc
            if hasattr(exc, "code") and hasattr(exc, "message"):  # postgrest.APIError
                body = {
                    "code": exc.code,
                    "message": exc.message,
                    "details": getattr(exc, "details", None),
                }
                raise _rpc_error(fn, None, body) from exc
            raise DrainpipeError("unexpected", f"{SCHEMA}.{fn}: {exc}") from exc
        return _checked(fn, getattr(result, "data", result))

    # -- QueueBackend -----------------------------------------------------------------------

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float = 0,
        max_attempts: int = 5,
        dedupe_key: str | None = None,
        dedupe: DedupeMode = "always",
    ) -> int:
        """Send one message; ``delay`` is rounded up to whole seconds. No dedupe keys."""
        if dedupe_key is not None:
            raise missing_feature("dedupe_key", self.name)
        data = await self.rpc(
            "send",
            {
                "queue_name": queue,
                "message": {"payload": payload, "max_attempts": max_attempts},
                "sleep_seconds": _whole_seconds(delay),
            },
        )
        return _message_id("send", _first("send", data))

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        """Send several messages in one ``send_batch`` call; ids in order."""
        if not payloads:
            return []
        data = await self.rpc(
            "send_batch",
            {
                "queue_name": queue,
                "messages": [{"payload": p, "max_attempts": max_attempts} for p in payloads],
                "sleep_seconds": _whole_seconds(delay),
            },
        )
        ids = [_message_id("send_batch", i) for i in (data if isinstance(data, list) else [data])]
        if len(ids) != len(payloads):
            raise _malformed("send_batch", f"{len(payloads)} message ids", data)
        return ids

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        """Read up to ``batch`` messages, hiding them for ``lease`` seconds (rounded up,
        at least 1). Messages read more often than their ``max_attempts`` (a worker died
        on the last attempt) are archived as dead and left out."""
        live: list[Job[Any]] = []
        # a read that only found dead messages says nothing about what is left: read again,
        # so drain() does not stop early (each round archives at least one message)
        for _ in range(10):
            rows = await self.rpc(
                "read",
                {"queue_name": queue, "sleep_seconds": max(1, _whole_seconds(lease)), "n": batch},
            )
            if rows is None:
                rows = []
            if not isinstance(rows, list):
                raise _malformed("read", "a list of messages", rows)
            dead = 0
            for row in rows:
                job = _parse_row(queue, row)
                if job.attempts > job.max_attempts:
                    _flag(
                        "archive",
                        await self.rpc("archive", {"queue_name": queue, "message_id": job.id}),
                    )
                    dead += 1
                else:
                    live.append(job)
            if live or not dead:
                break
        return live

    async def complete(self, job: Job[Any]) -> bool:
        """Archive the message. No attempt fence: PostgREST offers none. False: it was gone."""
        return _flag(
            "archive", await self.rpc("archive", {"queue_name": job.queue, "message_id": job.id})
        )

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        """``"queued"`` without any call while attempts remain (the message reappears when
        its lease ends; ``error`` and ``retry_in`` cannot be stored); otherwise archive it:
        ``"dead"``, or None when the message was already gone."""
        if job.attempts < job.max_attempts:
            return "queued"
        archived = _flag(
            "archive", await self.rpc("archive", {"queue_name": job.queue, "message_id": job.id})
        )
        return "dead" if archived else None

    async def extend(self, job: Job[Any], lease: float) -> bool:
        """Always False: ``pgmq_public`` has no call to move a message's visibility."""
        return False


def _whole_seconds(value: float) -> int:
    """pgmq takes integer seconds; rounding up never makes a delay or lease shorter."""
    return max(0, math.ceil(value))


def _positive(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def _parse_row(queue: str, row: Any) -> Job[Any]:
    """A ``pgmq.message_record`` as JSON → Job. A message another producer sent without our
    ``{payload, max_attempts}`` layout is taken whole as the payload."""
    if not isinstance(row, Mapping) or "msg_id" not in row:
        raise _malformed("read", "message rows", row)
    try:
        return _row_job(queue, row)
    except (TypeError, ValueError) as exc:
        raise _malformed("read", f"a message row ({exc})", row) from None


def _row_job(queue: str, row: Mapping[str, Any]) -> Job[Any]:
    message = row.get("message")
    if isinstance(message, Mapping) and "payload" in message:
        stored, max_attempts = message["payload"], message.get("max_attempts")
    else:
        stored, max_attempts = message, None
    payload, context = unwrap_payload(stored)
    return Job(
        id=_message_id("read", row["msg_id"]),
        queue=queue,
        payload=payload,
        context=context,
        attempts=int(row.get("read_ct") or 0),
        max_attempts=_positive(max_attempts, DEFAULT_MAX_ATTEMPTS),
        enqueued_at=_instant(row.get("enqueued_at")),
        visible_until=_instant(row.get("vt")),
        last_error=None,
    )
