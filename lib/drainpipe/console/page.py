"""The Job Inbox admin page: one HTML document with its CSS and JS inline, no build step, no
external asset, served under a Content-Security-Policy that allows only this response's
nonce to run or style anything and only this origin to be called.

The page holds no data: it asks for a management token once (kept in ``sessionStorage``,
gone with the tab), calls the API with ``Authorization: Bearer`` like any client, and
renders every value with ``textContent`` (never as HTML).

Its HTML, CSS and JS are three files under ``static/`` (``page.html``, ``page.css``,
``page.js``: package data, shipped in the wheel), read on the first page served through the
package's loader (``pkgutil.get_data``, so a zipped install serves them too; not
``importlib.resources``, whose import pulls ``tempfile``, ``zipfile`` and more into a cold
start: measured +15 to 40 ms on the first page, against about 1 ms). Each response inlines
the CSS and JS into the HTML, so the page stays one response that the nonce above covers
whole: no ``'self'`` script or style source is needed, and the policy is no wider than with
everything in one file.
"""

from __future__ import annotations

import html
import re
import secrets
from functools import cache

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
    template, css, js = _files()
    values = {
        "nonce": nonce,
        "base": html.escape(base, quote=True),
        "target": html.escape(target, quote=True),
        "refresh": html.escape(f"{refresh_seconds:g}", quote=True),
        "inboxes": "1" if inboxes else "",
        "css": css,
        "js": js,
    }
    # one pass: a value (a target named "{{js}}", or the JS itself) is never read again as
    # a placeholder
    body = _PLACEHOLDER.sub(lambda match: values[match.group(1)], template).encode("utf-8")
    headers = dict(_PAGE_HEADERS)
    headers["Content-Security-Policy"] = content_security_policy(nonce)
    response = Response(200, body, headers=headers, content_type="text/html; charset=utf-8")
    if head:
        response.body = b""
    return response


_PLACEHOLDER = re.compile(r"\{\{(nonce|base|target|refresh|inboxes|css|js)\}\}")


@cache
def _files() -> tuple[str, str, str]:
    """``page.html``, ``page.css`` and ``page.js``, read on the first page served (a function
    that never serves the page never reads them)."""
    package = __package__ or __name__.rpartition(".")[0]
    html_, css, js = (
        _read(package, f"static/{name}") for name in ("page.html", "page.css", "page.js")
    )
    # inlined as they are: a closing tag inside would end the element early
    if "</style" in css.lower() or "</script" in js.lower():
        raise RuntimeError("page.css / page.js must not hold a closing </style> or </script>")
    return html_, css, js


def _read(package: str, name: str) -> str:
    import pkgutil  # here: a function that never serves the page never imports it

    data = pkgutil.get_data(package, name)
    if data is None:  # a loader that cannot read package data
        raise FileNotFoundError(f"{package}/{name} is not readable from its loader")
    return data.decode("utf-8")
