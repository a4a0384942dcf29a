"""One PostgREST RPC over httpx: ``POST {url}/rest/v1/rpc/<fn>`` with named JSON arguments
in an exposed schema, and its answer or its error as a :class:`DrainpipeError`.

httpx is imported on the first request, not with this module: ``import drainpipe`` and a
function file's cold start pay for it only when they call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..db import dump_json
from ..db.json import load_json
from ..errors import (
    MISSING_OBJECT_POSTGREST_CODES,
    MISSING_OBJECT_STATES,
    SCHEMA_NOT_EXPOSED,
    DrainpipeError,
    postgrest_error,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["RestTransport", "expose_hint", "import_httpx", "rest_url"]

_MAX_MESSAGE = 500  # a proxy's HTML error page says little past its start


def import_httpx() -> Any:
    """httpx, imported without its command-line client: httpx's ``__init__`` imports
    ``httpx._main`` (click, rich, pygments: ~100 ms) whenever those happen to be installed,
    and a function's first request would pay for a CLI it never runs. ``httpx.main`` is
    then httpx's own stand-in; ``import httpx._main`` still works afterwards."""
    import sys

    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        import httpx

        return httpx
    sys.modules["httpx._main"] = None  # type: ignore[assignment]  # ImportError: the stand-in
    try:
        import httpx
    finally:
        if sys.modules.get("httpx._main") is None:
            del sys.modules["httpx._main"]
    return httpx


def expose_hint(schema: str) -> str:
    """Where a user tells PostgREST to serve ``schema``."""
    return (
        f"expose the {schema} schema: Supabase dashboard → Project Settings → Data API →"
        f' Exposed schemas (add {schema}), or `schemas = ["public", "graphql_public",'
        f' "{schema}"]` under [api] in supabase/config.toml (your own PostgREST:'
        f" db-schemas)"
    )


def rest_url(url: str) -> str:
    """``https://<ref>.supabase.co`` (or the same with ``/rest/v1``) → the REST root."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError("url must be an http(s) URL such as https://<project>.supabase.co")
    base = url.rstrip("/")
    return base if base.endswith("/rest/v1") else base + "/rest/v1"


class RestTransport:
    """Calls functions of one exposed schema with the service-role key."""

    def __init__(
        self,
        url: str,
        key: str,
        schema: str,
        *,
        timeout: float,
        http_client: httpx.AsyncClient | None,
        hint: Callable[[str], str],
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError("key must be the service-role key (a non-empty string)")
        self.rest_url = rest_url(url)
        self.schema = schema
        self.timeout = timeout
        self._rpc_root = f"{self.rest_url}/rpc/"
        self._hint = hint
        self._http = http_client
        self._owns_http = http_client is None
        self._headers = {
            "apikey": key,
            "Authorization": f"Bearer {key}",
            "Accept-Profile": schema,
            "Content-Profile": schema,
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    async def aclose(self) -> None:
        if self._http is not None and self._owns_http:
            await self._http.aclose()
            self._http = None

    async def call(self, fn: str, params: Mapping[str, Any]) -> Any:
        # drainpipe's checked JSON (floats >= 1e16 keep their ".0", NaN is refused) rather
        # than httpx's json.dumps
        body = dump_json(params if isinstance(params, dict) else dict(params), "params")
        httpx = import_httpx()
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        try:
            response = await self._http.post(
                self._rpc_root + fn, content=body, headers=self._headers
            )
        except httpx.HTTPError as exc:
            raise self.transport_error(fn, exc) from exc
        content = response.content
        try:
            answer = load_json(content) if content else None
        except ValueError:
            text = response.text
            if not response.is_success:
                raise self.error(fn, response.status_code, text) from None
            # a proxy or maintenance page answering 2xx: its text is no result of ours
            raise DrainpipeError(
                "unexpected", f"{self.schema}.{fn}: expected JSON, got {_clip(text)}"
            ) from None
        if not response.is_success:
            raise self.error(fn, response.status_code, answer)
        if isinstance(answer, dict) and isinstance(answer.get("message"), str) and "code" in answer:
            # a gateway or an RPC wrapper reporting a failure with 200 (no function of the API
            # returns an object with a string "message" and a "code")
            raise self.error(fn, None, answer)
        return answer

    def transport_error(self, fn: str, exc: Exception) -> DrainpipeError:
        httpx = import_httpx()

        if isinstance(exc, httpx.TimeoutException):
            return DrainpipeError("timeout", f"{self.schema}.{fn}: request timed out ({exc!r})")
        if isinstance(exc, httpx.TransportError):
            return DrainpipeError(
                "network", f"{self.schema}.{fn}: {str(exc) or type(exc).__name__}"
            )
        return DrainpipeError("unexpected", f"{self.schema}.{fn}: {exc}")

    def error(self, fn: str, status: int | None, body: Any) -> DrainpipeError:
        """A PostgREST error body ``{code, message, details, hint}`` (or anything else)."""
        if isinstance(body, Mapping):
            code = None if body.get("code") is None else str(body["code"])
            message = str(body.get("message") or f"HTTP {status}")
            if body.get("details"):
                message += f" ({body['details']})"
            if body.get("hint"):
                message += f" (hint: {body['hint']})"
        else:
            code = None
            message = str(body) if body not in (None, "") else f"HTTP {status}"
        text = f"{self.schema}.{fn}: {_clip(message)}"
        missing = code in MISSING_OBJECT_POSTGREST_CODES or code in MISSING_OBJECT_STATES
        names_api = f"{self.schema}." in message or f'"{self.schema}"' in message
        if missing and names_api:
            text += " (the rest-api module creates it: `drainpipe sql apply --modules rest-api`)"
        error = postgrest_error(status, code, text)
        if error.code == SCHEMA_NOT_EXPOSED:
            # one clear error: which schema, and where the switch is
            return DrainpipeError(
                "invalid_request",
                f"{self.schema}.{fn}: PostgREST does not expose the schema {self.schema}"
                f" ({_clip(message)}): {self._hint(self.schema)}",
                code=SCHEMA_NOT_EXPOSED,
            )
        return error


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "…"
