"""The Job Inbox admin page: one HTML document with its CSS and JS inline, no build step, no
external asset, served under a Content-Security-Policy that allows only this response's
nonce to run or style anything and only this origin to be called.

The page holds no data: it asks for a management token once (kept in ``sessionStorage``,
gone with the tab), calls the API with ``Authorization: Bearer`` like any client, and
renders every value with ``textContent`` (never as HTML).

Its HTML, CSS and JS are ``static/page.html`` (shipped in the wheel), read once and served
with this response's nonce and the mount's base filled in.
"""

from __future__ import annotations

import html
import secrets
from functools import cache
from pathlib import Path

from ..http import Response

_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def content_security_policy(nonce: str) -> str:
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            f"style-src 'nonce-{nonce}'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def page_response(
    *,
    base: str,
    target: str,
    refresh_seconds: float = 15,
    inboxes: bool = False,
    head: bool = False,
) -> Response:
    """The admin page for an app mounted at ``base`` (``""`` at the root); ``inboxes``: the
    app serves ``GET /inboxes``, so the overview shows the agent inboxes too."""
    nonce = secrets.token_urlsafe(18)
    body = (
        _page()
        .replace("{{nonce}}", nonce)
        .replace("{{base}}", html.escape(base, quote=True))
        .replace("{{target}}", html.escape(target, quote=True))
        .replace("{{refresh}}", html.escape(f"{refresh_seconds:g}", quote=True))
        .replace("{{inboxes}}", "1" if inboxes else "")
    ).encode("utf-8")
    headers = dict(_PAGE_HEADERS)
    headers["Content-Security-Policy"] = content_security_policy(nonce)
    response = Response(200, body, headers=headers, content_type="text/html; charset=utf-8")
    if head:
        response.body = b""
    return response


@cache
def _page() -> str:
    return (Path(__file__).with_name("static") / "page.html").read_text(encoding="utf-8")
