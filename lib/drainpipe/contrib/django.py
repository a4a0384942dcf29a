"""Django: idempotency keys as middleware, and the ORM's connection for enqueues that
commit with a view's writes.

    # settings.py
    MIDDLEWARE = [..., "drainpipe.contrib.django.IdempotencyMiddleware"]
    DRAINPIPE_IDEMPOTENCY = {"required": False, "ttl": 86400}   # optional; also "db"

    # views.py
    from django.db import transaction
    from drainpipe.contrib.django import connection
    JOBS = sync.Jobs("postgresql://...", {"emails": Email})     # once, at import

    with transaction.atomic():
        order = Order.objects.create(...)
        JOBS.bound_to(connection()).enqueue("emails", Email(to=order.email))

The middleware keeps its keys on a pool of its own (``DRAINPIPE_IDEMPOTENCY["db"]``, else
a DSN built from ``DATABASES["default"]``), never on the ORM's connection: a key is claimed
before the view runs and must be visible to a concurrent retry at once, whatever
transaction the view opens. Django (4.2+, on psycopg 3) is imported on first use.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from ..http import Response
    from ..sync.idempotency import Idempotency
    from ..sync.inbox import WebhookInbox

__all__ = ["IdempotencyMiddleware", "connection", "database_url", "webhook_view"]


def connection(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg connection under Django's ``connections[using]`` (opened if needed).
    Statements drainpipe runs on it join Django's open transaction: inside
    ``transaction.atomic()`` an enqueue commits or rolls back with the ORM's writes."""
    from django.db import connections

    wrapper = connections[using]
    wrapper.ensure_connection()
    conn: psycopg.Connection[Any] = wrapper.connection
    return conn


def database_url(using: str = "default") -> str:
    """A libpq connection string for ``DATABASES[using]`` (for drainpipe's own pools)."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    config = settings.DATABASES[using]
    parts = {
        "dbname": config.get("NAME"),
        "user": config.get("USER"),
        "password": config.get("PASSWORD"),
        "host": config.get("HOST"),
        "port": str(config["PORT"]) if config.get("PORT") else None,
    }
    return make_conninfo(**{key: value for key, value in parts.items() if value})


def webhook_view(inbox: WebhookInbox) -> Callable[[Any], Any]:
    """A Django view receiving webhooks into ``inbox`` (a :class:`drainpipe.sync.WebhookInbox`):
    ``path("hooks/billing", webhook_view(inbox))``. POST only (405 ``Allow: POST``
    otherwise), exempt from CSRF (the signature is the check), answering what
    ``inbox.receive`` answers: 202/200 JSON, or a Problem."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    def view(request: Any) -> Any:
        if request.method != "POST":
            response = HttpResponse(status=405)
            response["Allow"] = "POST"
            return response
        status, headers, body = inbox.receive(
            _headers(request), bytes(request.body), path=request.path
        )
        response = HttpResponse(body, status=status)
        for name, value in headers.items():
            response[name] = value
        return response

    exempt: Callable[[Any], Any] = csrf_exempt(view)
    return exempt


class IdempotencyMiddleware:
    """Runs a non-safe request with an ``Idempotency-Key`` at most once and replays its
    response (status, body, content type, ``Idempotency-Replayed: true``) to retries; the
    409/422/400 answers of :class:`drainpipe.Idempotency`. Options from
    ``settings.DRAINPIPE_IDEMPOTENCY`` (those of :class:`drainpipe.sync.Idempotency`,
    plus ``db``); a ``scope`` callable gets Django's ``HttpRequest``. A view that raises or
    answers 5xx releases the key (Django turns an exception into a 500 inside the chain).

    The default scope is the signed-in user, else the session (a keyed hash of either:
    ``scope_key``, else ``$DRAINPIPE_SCOPE_KEY``, else a key derived from ``SECRET_KEY``);
    a request with a key and neither → 400 ``IDEMPOTENCY_SCOPE_REQUIRED`` unless
    ``anonymous``. Bodies over ``max_body_bytes`` → 413 ``BODY_TOO_LARGE``."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        from django.conf import settings

        from ..idempotency.keys import scope_key_bytes
        from ..sync.idempotency import Idempotency

        options: dict[str, Any] = dict(getattr(settings, "DRAINPIPE_IDEMPOTENCY", None) or {})
        db = options.pop("db", None) or database_url()
        key = scope_key_bytes(options.pop("scope_key", None))
        if key is None:  # Django's own secret, never used as is: a key derived for this
            secret = str(settings.SECRET_KEY).encode("utf-8")
            key = hmac.new(secret, b"drainpipe-idempotency-scope", hashlib.sha256).digest()
        self.scope_key = key
        options.setdefault("scope", self.user_or_session)
        self.get_response = get_response
        self.idempotency: Idempotency = Idempotency(db, scope_key=key, **options)

    def user_or_session(self, request: Any) -> str | None:
        """The default scope: the signed-in user, else the session, as a keyed hash; None
        (no caller) for an anonymous request without a session."""
        from ..idempotency.keys import keyed_scope

        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            return keyed_scope(self.scope_key, "user", str(user.pk))
        session = getattr(request, "session", None)
        session_key = getattr(session, "session_key", None)
        if session_key:
            return keyed_scope(self.scope_key, "session", str(session_key))
        return None

    def __call__(self, request: Any) -> Any:
        idem = self.idempotency
        decision = idem.before(
            request.method,
            request.path,
            _headers(request),
            lambda: _capped_body(request, idem.max_body_bytes),
            request,
            str(request.META.get("QUERY_STRING") or ""),
        )
        if decision is None:
            return self.get_response(request)
        from ..http import Response

        if isinstance(decision, Response):
            return _django_response(decision)
        try:
            response = self.get_response(request)
            if getattr(response, "streaming", False):
                response = _buffered(response)
            body = bytes(response.content)
        except BaseException:
            idem.abandon(decision)
            raise
        refusal = idem.after(
            decision, int(response.status_code), body, response.get("Content-Type"), request.path
        )
        return response if refusal is None else _django_response(refusal)


def _capped_body(request: Any, max_bytes: int) -> bytes:
    """The body, refused (413) before Django reads it when its declared length is over the
    cap; Django itself refuses a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
    from ..http_guards import body_too_large

    length = str(request.META.get("CONTENT_LENGTH") or "").strip()
    if length.isdigit() and int(length) > max_bytes:
        raise body_too_large(max_bytes)
    data = bytes(request.body)
    if len(data) > max_bytes:
        raise body_too_large(max_bytes)
    return data


def _headers(request: Any) -> Mapping[str, str]:
    return {str(name): str(value) for name, value in request.headers.items()}


def _django_response(response: Response) -> Any:
    from django.http import HttpResponse

    out = HttpResponse(response.body, status=response.status)
    for name, value in response.headers.items():
        out[name] = value
    if response.content_type is None:
        del out["Content-Type"]
    return out


def _buffered(response: Any) -> Any:
    """A streaming response read in full (a replay needs the whole body)."""
    from django.http import HttpResponse

    body = b"".join(bytes(chunk) for chunk in response.streaming_content)
    out = HttpResponse(body, status=response.status_code)
    for name, value in response.items():
        out[name] = value
    return out
