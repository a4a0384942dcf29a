"""What an HTTP request and a WebSocket of drainpipe's apps share: headers, the URL's path
and query, the query's parameters, the path's parameters, the client and its cookies, and a
``state`` for what a guard found out (the caller's principal).

The attribute names are Starlette's (``headers``, ``url.path``, ``query_params``,
``path_params``, ``client``, ``cookies``, ``state``, ``scope``), so an
``authorize(request)`` written for a Starlette app reads these objects unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .http import Headers


class QueryParams(Mapping[str, str]):
    """The query string's parameters, percent-decoded; blank values are kept. ``get`` and
    ``[]`` answer a repeated name's last value, :meth:`getlist` every value in order."""

    def __init__(self, query: str) -> None:
        # imported here: urllib.parse (and ipaddress under it) would add to every function's
        # cold start, and only a route that reads its query needs it
        from urllib.parse import parse_qsl

        self._pairs = parse_qsl(query, keep_blank_values=True)
        self._last = dict(self._pairs)

    def getlist(self, name: str) -> list[str]:
        return [value for key, value in self._pairs if key == name]

    def multi_items(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def __getitem__(self, name: str) -> str:
        return self._last[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._last)

    def __len__(self) -> int:
        return len(self._last)


class URL(NamedTuple):
    """The parts of a request's URL an app reads: the path (the whole path, a mount's
    prefix included) and the raw query string without ``?``."""

    path: str
    query: str

    def __str__(self) -> str:
        return f"{self.path}?{self.query}" if self.query else self.path


class Address(NamedTuple):
    host: str
    port: int


def parse_cookies(header: str) -> dict[str, str]:
    """The ``Cookie`` header's pairs (a browser sends ``a=1; b=2``); surrounding double
    quotes of a value are dropped, a pair without ``=`` has the empty name."""
    cookies: dict[str, str] = {}
    for chunk in header.split(";"):
        name, equals, value = chunk.partition("=")
        if not equals:
            name, value = "", name
        name, value = name.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if name or value:
            cookies[name] = value
    return cookies


def query_text(scope: Mapping[str, Any]) -> str:
    """The scope's raw query string as text (latin-1 keeps every byte as one character)."""
    raw = scope.get("query_string") or b""
    return raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)


class Connection:
    """The base of :class:`~drainpipe.http.Request` and
    :class:`~drainpipe.http_websocket.WebSocket`: everything read from the ASGI scope."""

    scope: MutableMapping[str, Any]
    headers: Headers
    path_params: dict[str, str]

    def _path_and_query(self) -> tuple[str, str]:
        return str(self.scope.get("path") or "/"), query_text(self.scope)

    @property
    def url(self) -> URL:
        return URL(*self._path_and_query())

    @property
    def query_params(self) -> QueryParams:
        found = self.__dict__.get("_query_params")
        if found is None:
            found = self.__dict__["_query_params"] = QueryParams(self._path_and_query()[1])
        return found

    @property
    def client(self) -> Address | None:
        client = self.scope.get("client")
        return None if not client else Address(str(client[0]), int(client[1]))

    @property
    def cookies(self) -> dict[str, str]:
        return parse_cookies(self.headers.get("cookie", ""))

    @property
    def state(self) -> SimpleNamespace:
        """Attributes a guard sets for the handlers after it (``state.principal``)."""
        found = self.__dict__.get("_state")
        if found is None:
            found = self.__dict__["_state"] = SimpleNamespace()
        return found


__all__ = ["URL", "Address", "Connection", "QueryParams", "parse_cookies", "query_text"]
