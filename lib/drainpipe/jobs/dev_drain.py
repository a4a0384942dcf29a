"""The loop that plays a cron caller locally: ``dev_drain`` calls a drain route with GET and
the bearer secret on an interval, and reports refusals and failures without stopping."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets as _secrets
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..engine.runner import call_hook
from ..errors import DrainpipeError

if TYPE_CHECKING:
    import httpx


log = logging.getLogger("drainpipe")


# -- the local cron caller ------------------------------------------------------------------

_KIND_BY_STATUS: dict[int, Any] = {
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


def _warn(error: BaseException) -> None:
    log.warning("%s", error)


class DevDrain:
    """Calls a drain route with ``GET`` and the bearer secret every ``every`` seconds.

    Build it with :func:`dev_drain` inside a running event loop. The first call happens
    one interval after the start; a tick is skipped while the previous call still runs.
    A non-2xx answer or a failed call goes to ``on_error`` (a :class:`DrainpipeError`,
    ``status`` set to the answer's status) and the loop keeps going.
    """

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        every: float = 60.0,
        on_error: Callable[[BaseException], Any] | None = None,
        on_response: Callable[[httpx.Response], Any] | None = None,
        timeout: float = 120.0,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise ValueError("dev_drain needs the drain route's URL")
        if not isinstance(secret, str) or not secret:
            raise ValueError("dev_drain needs the drain route's secret, such as dev_drain_secret()")
        if (
            not isinstance(every, int | float)
            or isinstance(every, bool)
            or not math.isfinite(every)
            or every <= 0
        ):
            raise ValueError("dev_drain: every must be a positive number of seconds")
        self.url = url
        self.every = float(every)
        self.on_error = on_error or _warn
        self.on_response = on_response
        self.timeout = timeout
        self._secret = secret
        self._running = False
        self._loop_task: asyncio.Task[None] | None = None
        self._ticks: set[asyncio.Task[Any]] = set()

    def start(self) -> DevDrain:
        """Start the interval (done by :func:`dev_drain`); needs a running event loop."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._interval())
        return self

    async def _interval(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            if self._running:
                continue  # the previous call still runs: skip this tick
            task = asyncio.create_task(self.tick())
            self._ticks.add(task)
            task.add_done_callback(self._ticks.discard)

    @property
    def running(self) -> bool:
        """True while a call is in flight."""
        return self._running

    async def tick(self) -> httpx.Response | None:
        """Call the route once now; the response, or None when skipped or failed."""
        if self._running:
            return None
        self._running = True
        try:
            import httpx

            try:
                async with httpx.AsyncClient(
                    timeout=httpx.Timeout(self.timeout, connect=10.0)
                ) as client:
                    # as UTF-8 bytes: httpx would refuse a non-ASCII str header
                    authorization = f"Bearer {self._secret}".encode()
                    response = await client.get(self.url, headers={b"Authorization": authorization})
            except Exception as exc:
                # not only httpx.HTTPError: a bad URL raises InvalidURL, a bad port
                # ValueError; the loop must report them and keep going
                reason = str(exc) or type(exc).__name__
                error = DrainpipeError(
                    "network" if isinstance(exc, httpx.HTTPError) else "unexpected",
                    f"[drainpipe] dev drain failed: {reason}",
                )
                error.__cause__ = exc
                await call_hook(self.on_error, error)
                return None
            if not 200 <= response.status_code < 300:
                status = response.status_code
                await call_hook(
                    self.on_error,
                    DrainpipeError(
                        _KIND_BY_STATUS.get(status, "unexpected"),
                        f"[drainpipe] dev drain answered {status}",
                        status=status,
                    ),
                )
            await call_hook(self.on_response, response)
            return response
        finally:
            self._running = False

    def stop(self) -> None:
        """Stop the interval and cancel a call in flight. Safe to call twice."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            self._loop_task = None
        for task in list(self._ticks):
            task.cancel()

    async def __aenter__(self) -> DevDrain:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


def dev_drain(
    url: str,
    secret: str,
    *,
    every: float = 60.0,
    on_error: Callable[[BaseException], Any] | None = None,
    on_response: Callable[[httpx.Response], Any] | None = None,
) -> DevDrain:
    """Call the drain route at ``url`` every ``every`` seconds (first call after one
    interval) from the running event loop; ``stop()`` ends it. ``on_error`` gets a
    :class:`DrainpipeError` for a non-2xx answer or a failed call (default: a log warning);
    ``on_response`` gets every answer. ``ValueError`` for an empty secret or ``every <= 0``.
    """
    return DevDrain(url, secret, every=every, on_error=on_error, on_response=on_response).start()


def dev_drain_secret(env: MutableMapping[str, str] = os.environ, name: str = "CRON_SECRET") -> str:
    """``env[name]`` when set and non-empty; otherwise 64 random hex characters, written
    into ``env[name]`` so the route (which reads it) and its caller share them."""
    value = env.get(name)
    if value:
        return value
    value = _secrets.token_hex(32)
    env[name] = value
    return value
