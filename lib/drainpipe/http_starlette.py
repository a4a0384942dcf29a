"""Answering a request that came through a user's Starlette or FastAPI app.

drainpipe serves its own apps with :mod:`drainpipe.http` and never needs Starlette. Its
``handle(request)`` / ``receive(request)`` methods also take a Starlette request, from a
route of the user's own app, and must then answer with a Starlette response (FastAPI
sends those as they are). This is the one module that imports Starlette, and only inside
these functions: they run only when the caller handed in a Starlette object, so Starlette
is installed and already imported by then. ``tests/package/test_http_stack.py`` keeps
it that way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .http import Response


def starlette_response(response: Response, *, exact: bool = False) -> Any:
    """A Starlette response of ``response``'s status, body and headers.

    ``exact``: the headers are sent exactly as they are, ``content-length`` added, nothing
    else (an idempotent replay must carry the stored content type unchanged); otherwise
    Starlette sets them up as usual (it adds a charset to a ``text/*`` content type)."""
    from starlette.responses import Response as StarletteResponse

    if not exact:
        # the content type travels as a raw header: media_type would append "; charset=utf-8"
        # to text/* types and change what was stored
        return StarletteResponse(
            response.body, status_code=response.status, headers=response.headers
        )
    out = StarletteResponse(response.body, status_code=response.status)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
    if response.status >= 200 and response.status not in (204, 304):
        raw.append((b"content-length", str(len(response.body)).encode()))
    out.raw_headers = raw
    return out


def rebuilt_starlette_response(original: Any, status: int, body: bytes) -> Any:
    """A plain Starlette response with ``original``'s status, headers and background task
    and the ``body`` read from it (a streaming or file response, read in full to store)."""
    from starlette.responses import Response as StarletteResponse

    rebuilt = StarletteResponse(
        body, status_code=status, background=getattr(original, "background", None)
    )
    raw = [(k, v) for k, v in original.raw_headers if k.lower() != b"content-length"]
    if status >= 200 and status not in (204, 304):
        raw.append((b"content-length", str(len(body)).encode()))
    rebuilt.raw_headers = raw
    return rebuilt


__all__ = ["rebuilt_starlette_response", "starlette_response"]
