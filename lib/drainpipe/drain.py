"""The drain route a cron caller hits, and the loop that plays that caller locally.

A serverless function cannot run a worker forever, so a scheduler (Vercel Cron, GitHub
Actions, ``dev_drain``) calls :class:`DrainRoute` every minute: it enqueues due schedules,
then drains each handler's queue until its time budget is spent, and answers a JSON report.

Leases. A job claimed by the route is leased for at least the time left in the budget
plus ``lease_margin`` seconds (30 by default), re-evaluated at each claim and heartbeat, and
the heartbeat beats every ``lease_margin / 3`` seconds. So while a handler runs, even past
the budget, its lease always reaches ``lease_margin`` seconds ahead, and the next cron call
cannot claim the same job. A ``lease`` option larger than that is used as is.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
import math
import os
import secrets as _secrets
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from .backends.capabilities import SupportsScheduleRuns
from .errors import DrainpipeError
from .http import (
    ProblemFormatter,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    as_request,
    json_response,
    method_not_allowed,
    problem_response,
    run_asgi,
)
from .validation import positive_int, seconds
from .worker import call_hook

if TYPE_CHECKING:
    import httpx

    from .jobs import Handler, Jobs, OnError

log = logging.getLogger("drainpipe")

ALLOW = "GET, POST"
UNAUTHORIZED_DETAIL = "The drain route needs its bearer secret"
DEFAULT_LEASE_MARGIN = 30.0


def _option_error(exc: DrainpipeError) -> ValueError:
    return ValueError(str(exc))


class DrainRoute:
    """An ASGI app (the object itself) that runs due schedules and drains queues.

    Build it with :meth:`drainpipe.Jobs.drain_route`. ``handlers`` maps queue → handler in
    drain order; ``budget`` is the seconds one call may spend claiming (claimed jobs always
    finish); ``inboxes`` is an optional sequence of ``(WebhookInbox, handler)`` pairs drained
    after the queues. ``lease`` (seconds, optional) is a floor; see the module docstring.
    Construction raises ``ValueError`` for an empty secret or an undeclared queue.
    """

    def __init__(
        self,
        jobs: Jobs,
        *,
        secret: str | None = None,
        handlers: Mapping[str, Handler] | None = None,
        budget: float = 50.0,
        schedules: bool = True,
        on_error: OnError | None = None,
        monitor: Any = None,
        concurrency: int = 1,
        batch: int = 1,
        lease: float | None = None,
        all_tenants: bool = False,
        inboxes: Sequence[tuple[Any, Callable[..., Any]]] = (),
        problem: ProblemFormatter | None = None,
        lease_margin: float = DEFAULT_LEASE_MARGIN,
    ) -> None:
        if not isinstance(secret, str) or not secret:
            raise ValueError("drain_route needs a secret, such as os.environ['CRON_SECRET']")
        if handlers is None:
            handlers = {}
        if not isinstance(handlers, Mapping):
            raise TypeError("handlers must be a mapping of queue name to handler")
        for queue, handler in handlers.items():
            if queue not in jobs.queue_names:
                raise ValueError(f'Unknown queue "{queue}". Queues: {", ".join(jobs.queue_names)}')
            if not callable(handler):
                raise TypeError(f'The handler of queue "{queue}" is not callable')
        try:
            self.budget = seconds(budget, "budget")
            self.lease_floor = 0.0 if lease is None else seconds(lease, "lease")
            self.lease_margin = seconds(lease_margin, "lease_margin", minimum=0.001)
            self.concurrency = positive_int(concurrency, "concurrency")
            self.batch = positive_int(batch, "batch")
        except DrainpipeError as exc:
            raise _option_error(exc) from exc
        self.inboxes = list(inboxes)
        sources: set[str] = set()
        for pair in self.inboxes:
            inbox, handler = pair
            source = getattr(inbox, "source", None)
            if not callable(getattr(inbox, "process", None)) or not isinstance(source, str):
                raise TypeError("inboxes must be (WebhookInbox, handler) pairs")
            if not callable(handler):
                raise TypeError(f'The handler of inbox "{source}" is not callable')
            if source in sources:
                raise ValueError(f'Inbox "{source}" is listed twice')
            sources.add(source)
        self.jobs = jobs
        self._secret = secret.encode()
        self.handlers = dict(handlers)
        self.schedules = schedules
        self.on_error = on_error
        self.monitor = monitor
        self.all_tenants = all_tenants
        self.problem = problem

    # -- HTTP ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await run_asgi(self._handle, scope, receive, send)

    @property
    def app(self) -> DrainRoute:
        """The ASGI app (the route itself), like every HTTP-facing object's ``app``."""
        return self

    async def handle(self, request: Any) -> Any:
        """Answer one request: a Starlette ``Response`` for a Starlette request, ours for ours."""
        response = await self._handle(as_request(request), request)
        return response if isinstance(request, Request) else response.to_starlette()

    async def _handle(self, request: Request, original: Any = None) -> Response:
        if request.method not in ("GET", "POST"):
            return method_not_allowed(ALLOW)
        if not self.authorized(request.headers.get("authorization")):
            # before anything else: a stranger costs no database call and no monitor hook
            error = DrainpipeError("unauthorized", UNAUTHORIZED_DETAIL)
            return problem_response(error, request.path, problem=self.problem)
        result = await self.run(original if original is not None else request)
        return json_response(result)

    def authorized(self, header: str | None) -> bool:
        """True when ``header`` (an ``Authorization`` value) carries the secret, with or
        without a case-insensitive ``Bearer `` prefix. Constant time in the secret."""
        token = (header or "").strip()
        if token[:7].lower() == "bearer ":
            token = token[7:].strip()
        # servers hand header bytes over as latin-1 text, so a UTF-8 secret arrives as its
        # bytes' latin-1 reading; a header built by hand holds the real text. Both are
        # compared, always, so the time taken says nothing about which one matched.
        try:
            wire = token.encode("latin-1")
        except UnicodeEncodeError:
            wire = b""
        as_sent = hmac.compare_digest(wire, self._secret)
        as_text = hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._secret)
        return as_sent | as_text

    # -- one drain -------------------------------------------------------------------------

    async def run(self, request: Any = None) -> dict[str, Any]:
        """Run schedules and drain the queues once (no authorization check); the report.

        ``{"schedules", "queues": {queue: {"succeeded", "failed"}}, "budgetExhausted",
        "errors", "more"}`` plus ``"inboxes": {source: {...}}`` when inboxes are set. A queue
        not reached before the deadline is left out; ``more`` says a drained or unreached
        queue still had ready jobs when the call ended, so a caller may call again at once.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.budget

        def lease() -> float:
            # never shorter than the rest of the budget plus a margin, even past the deadline
            return max(self.lease_floor, max(0.0, deadline - loop.time()) + self.lease_margin)

        token = await self._monitor("on_start", request)
        errors = 0
        scheduled = 0
        run_schedules = (
            getattr(self.jobs, "run_schedules", None) if self._runs_schedules() else None
        )
        if run_schedules is not None:
            try:
                scheduled = int(await run_schedules())
            except Exception as exc:
                errors += 1
                await call_hook(self.on_error, exc, None)

        queues: dict[str, dict[str, int]] = {}
        unfinished: list[str] = []  # drained queues stopped by the deadline, and unreached ones
        for queue, handler in self.handlers.items():
            if loop.time() >= deadline:
                unfinished.append(queue)
                continue
            try:
                report = await self.jobs.drain(
                    queue,
                    handler,
                    concurrency=self.concurrency,
                    batch=self.batch,
                    lease=lease,
                    deadline=deadline,
                    on_error=self.on_error,
                    all_tenants=self.all_tenants,
                    heartbeat_every=self.lease_margin / 3,
                )
            except Exception as exc:
                errors += 1
                await call_hook(self.on_error, exc, None)
                queues[queue] = {"succeeded": 0, "failed": 0}
                continue
            queues[queue] = {"succeeded": report.succeeded, "failed": report.failed}
            if report.budget_exhausted:
                unfinished.append(queue)

        inboxes: dict[str, dict[str, int]] = {}
        inbox_more = False
        for inbox, handler in self.inboxes:
            if loop.time() >= deadline:
                inbox_more = True  # not reached: it may hold work
                continue
            try:
                report = await inbox.process(handler, deadline=deadline, lease=lease())
            except Exception as exc:
                errors += 1
                await call_hook(self.on_error, exc, None)
                inboxes[inbox.source] = {"succeeded": 0, "failed": 0}
                continue
            inboxes[inbox.source] = {
                "succeeded": int(report.succeeded),
                "failed": int(report.failed),
            }
            inbox_more = inbox_more or bool(getattr(report, "budget_exhausted", False))

        result: dict[str, Any] = {
            "schedules": scheduled,
            "queues": queues,
            "budgetExhausted": loop.time() >= deadline or bool(unfinished) or inbox_more,
            "errors": errors,
            "more": inbox_more or await self._has_ready(unfinished),
        }
        if self.inboxes:
            result["inboxes"] = inboxes
        await self._monitor("on_finish", result, token)
        return result

    def _runs_schedules(self) -> bool:
        if not self.schedules or not callable(getattr(self.jobs, "run_schedules", None)):
            return False
        # pg_cron enqueues in the database itself; a backend without schedules has none
        if getattr(self.jobs, "scheduler", "drain") == "pg_cron":
            return False
        return isinstance(self.jobs.backend, SupportsScheduleRuns)

    async def _has_ready(self, queues: list[str]) -> bool:
        """One stats round trip, only when the deadline cut a queue short."""
        if not queues:
            return False
        try:
            stats = await self.jobs.stats(queues)
        except Exception:
            log.warning("drainpipe: could not tell whether work is left", exc_info=True)
            return True  # the deadline stopped us while claims still returned work
        return any(stat.ready > 0 for stat in stats.values())

    async def _monitor(self, name: str, *args: Any) -> Any:
        hook = getattr(self.monitor, name, None) if self.monitor is not None else None
        if hook is None:
            return None
        try:
            value = hook(*args)
            if inspect.isawaitable(value):
                value = await value
            return value
        except Exception as exc:  # a monitor never fails the drain nor counts as an error
            await call_hook(self.on_error, exc, None)
            return None


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
