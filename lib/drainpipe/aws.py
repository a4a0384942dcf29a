"""AWS Lambda entries: drainpipe's ASGI apps behind API Gateway and function URLs, and
one drain per EventBridge Scheduler event.

``lambda_handler(app)`` serves any drainpipe ASGI app (the drain route, ``inbox.app``,
``Idempotency.wrap(app)``, a function's lazy app) through ``mangum`` (``pip install
'drainpipe[aws]'``, imported on the first HTTP event). ``scheduled_handler(route)`` runs
``route.run()`` once for a scheduler event, without HTTP: the budget is the invocation's
remaining time minus ``reserve`` seconds, so claimed jobs can finish before Lambda's
timeout. ``lambda_handler(app, route=route)`` is both in one function.

Authentication. HTTP events come from a function URL or API Gateway, so anyone may send
them: they reach the app, and the drain route checks its bearer secret as everywhere. A
scheduler event is not HTTP: EventBridge invokes the function directly, allowed by IAM
(``lambda:InvokeFunction`` for the scheduler's role), and no one else can produce that
event through the URL. So a scheduler event carries no secret; it must say what it is,
``{"drainpipe": "drain"}`` (the schedule's input) or an EventBridge rule's
``"detail-type": "Scheduled Event"``; any other non-HTTP event raises ``ValueError``.

One event loop per Lambda process runs every invocation, so pools opened by a warm
container's first request are reused by the next ones. Lifespan is off by default: mangum
would otherwise run startup and shutdown (closing the pools) around every invocation.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .errors import DrainpipeError
from .http import Receive, Scope, Send

if TYPE_CHECKING:
    from .jobs.drain_route import DrainRoute

log = logging.getLogger("drainpipe.aws")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
DEFAULT_RESERVE = 10.0  # seconds a scheduled drain leaves for claimed jobs to finish


class LambdaContext(Protocol):
    """What the entries read of Lambda's context object."""

    def get_remaining_time_in_millis(self) -> int: ...


def is_http_event(event: Any) -> bool:
    """True for API Gateway (REST and HTTP API) and function URL events."""
    return isinstance(event, Mapping) and "requestContext" in event


def is_scheduled_event(event: Any) -> bool:
    """True for the schedule input ``{"drainpipe": "drain"}`` and EventBridge rules'
    ``Scheduled Event``s."""
    if not isinstance(event, Mapping) or "requestContext" in event:
        return False
    return event.get("drainpipe") == "drain" or event.get("detail-type") == "Scheduled Event"


class _Loop:
    """The process's one event loop, made current before every invocation (``asyncio.run``
    elsewhere in the process clears the current loop)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # made on the first event

    def current(self) -> asyncio.AbstractEventLoop:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        return self.loop

    def run(self, coroutine: Awaitable[Any]) -> Any:
        return self.current().run_until_complete(coroutine)

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is not None and not loop.is_closed():
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


class ScheduledDrain:
    """A Lambda handler that runs one drain per scheduler event; see the module docstring.

    ``route`` is a :class:`drainpipe.DrainRoute` or a function of no arguments that builds
    one (called on the first event, so importing the handler file needs no configuration).
    The budget of a call is ``remaining time - reserve`` seconds, capped at ``max_budget``
    when given; the route's own ``budget`` is not used. The call returns the route's report.
    It raises :class:`DrainpipeError` (so Lambda marks the invocation failed and the
    scheduler's retry policy applies) when the remaining time leaves no budget, or when the
    drain could not work at all: errors, and nothing scheduled, succeeded or failed. A
    partial failure returns the report (``errors`` > 0) and is logged.
    """

    def __init__(
        self,
        route: DrainRoute | Callable[[], DrainRoute],
        *,
        reserve: float = DEFAULT_RESERVE,
        max_budget: float | None = None,
        loop: _Loop | None = None,
    ) -> None:
        if not isinstance(reserve, int | float) or isinstance(reserve, bool) or reserve < 0:
            raise ValueError("reserve must be a number of seconds >= 0")
        if max_budget is not None and (
            not isinstance(max_budget, int | float)
            or isinstance(max_budget, bool)
            or max_budget <= 0
        ):
            raise ValueError("max_budget must be a positive number of seconds")
        self._source = route
        self._route: DrainRoute | None = None
        self.reserve = float(reserve)
        self.max_budget = None if max_budget is None else float(max_budget)
        self._loop = loop or _Loop()

    @property
    def route(self) -> DrainRoute:
        if self._route is None:
            source = self._source
            built = source() if callable(source) and not hasattr(source, "run") else source
            if not callable(getattr(built, "run", None)):
                raise TypeError("scheduled_handler needs a DrainRoute or a function building one")
            self._route = built  # type: ignore[assignment]
        assert self._route is not None
        return self._route

    def budget(self, context: LambdaContext | None) -> float:
        """Seconds this invocation may spend claiming; ``DrainpipeError`` when none are left."""
        route = self.route
        if context is None or not callable(getattr(context, "get_remaining_time_in_millis", None)):
            budget = route.budget  # a local call without a Lambda context
        else:
            budget = context.get_remaining_time_in_millis() / 1000 - self.reserve
        if self.max_budget is not None:
            budget = min(budget, self.max_budget)
        if budget <= 0:
            raise DrainpipeError(
                "timeout",
                f"[drainpipe] no time left to drain: the function's timeout must exceed the "
                f"reserve of {self.reserve:g} s (raise the timeout or lower reserve=)",
            )
        return budget

    def __call__(self, event: Any, context: LambdaContext | None = None) -> dict[str, Any]:
        return self._loop.run(self.drain(context))  # type: ignore[no-any-return]

    async def drain(self, context: LambdaContext | None = None) -> dict[str, Any]:
        """Run the drain once with this invocation's budget; the report."""
        route = self.route
        budget = self.budget(context)
        errors: list[BaseException] = []
        original_on_error = route.on_error

        async def record(error: BaseException, job: Any) -> None:
            if job is None:  # a step of the drain failed, not one job
                errors.append(error)
            if original_on_error is not None:
                result = original_on_error(error, job)
                if asyncio.iscoroutine(result):
                    await result

        # a shallow copy shares the route's jobs, handlers and pools; only this call's
        # budget and error recorder differ, and the route object stays as configured
        run = copy.copy(route)
        run.budget = budget
        run.on_error = record
        from .jobs.drain_unavailable import DrainUnavailable

        try:
            report = await run.run(None)
        except DrainUnavailable as unavailable:  # unreachable database or missing SQL
            log.error("scheduled drain could not work: %s", unavailable)
            raise
        did_something = report.get("schedules") or any(
            counts.get("succeeded") or counts.get("failed")
            for section in ("queues", "inboxes")
            for counts in (report.get(section) or {}).values()
        )
        if report.get("errors"):
            if not did_something:
                log.error("scheduled drain could not work: %s", report)
                error = DrainpipeError(
                    "network" if _all_transient(errors) else "unexpected",
                    f"[drainpipe] the scheduled drain could not work: {report['errors']} "
                    f"step(s) failed, first: {errors[0] if errors else 'unknown'}",
                )
                raise error from (errors[0] if errors else None)
            log.warning(
                "scheduled drain finished with %s failed step(s): %s", report["errors"], report
            )
        return report


def _all_transient(errors: list[BaseException]) -> bool:
    return bool(errors) and all(
        isinstance(error, DrainpipeError) and error.kind in ("network", "timeout")
        for error in errors
    )


class LambdaHandler:
    """A Lambda handler for HTTP events (through mangum) and, with ``route``, scheduler
    events (one drain each). See :func:`lambda_handler`."""

    def __init__(
        self,
        app: ASGIApp | None,
        *,
        route: DrainRoute | Callable[[], DrainRoute] | None = None,
        reserve: float = DEFAULT_RESERVE,
        max_budget: float | None = None,
        lifespan: Literal["auto", "on", "off"] = "off",
        api_gateway_base_path: str = "/",
    ) -> None:
        if app is None and route is None:
            raise ValueError("lambda_handler needs an ASGI app, a route, or both")
        if app is not None and not callable(app):
            raise TypeError("app must be an ASGI app")
        self.app = app
        self._loop = _Loop()
        self.scheduled = (
            None
            if route is None
            else ScheduledDrain(route, reserve=reserve, max_budget=max_budget, loop=self._loop)
        )
        self.lifespan = lifespan
        self.api_gateway_base_path = api_gateway_base_path
        self._mangum: Callable[[Any, Any], dict[str, Any]] | None = None

    def _adapter(self) -> Callable[[Any, Any], dict[str, Any]]:
        if self._mangum is None:
            try:
                from mangum import Mangum
            except ImportError as exc:
                raise RuntimeError(
                    "drainpipe.aws serves HTTP events with mangum: pip install 'drainpipe[aws]'"
                ) from exc
            from mangum.adapter import DEFAULT_TEXT_MIME_TYPES

            self._loop.current()  # mangum takes the current loop; make it ours
            self._mangum = Mangum(
                self.app,  # type: ignore[arg-type]
                lifespan=self.lifespan,
                api_gateway_base_path=self.api_gateway_base_path,
                # else Problem Details bodies go out base64 encoded, unreadable in logs
                text_mime_types=[*DEFAULT_TEXT_MIME_TYPES, "application/problem+json"],
            )
        return self._mangum

    def run_in_loop(self, awaitable: Awaitable[Any]) -> Any:
        """Run ``awaitable`` on the event loop the invocations use (to close pools in a
        test, or to warm a pool up at import time); its result."""
        return self._loop.run(awaitable)

    def close(self) -> None:
        """Close the handler's event loop, once what runs on it (pools) is closed. Lambda
        never needs this (the process ends with its loop); tests and scripts do."""
        self._loop.close()
        self._mangum = None

    def __call__(self, event: Any, context: Any = None) -> dict[str, Any]:
        if is_http_event(event):
            if self.app is None:
                raise ValueError("this Lambda handler serves no HTTP app, only scheduler events")
            adapter = self._adapter()
            self._loop.current()
            return adapter(event, context)
        if is_scheduled_event(event):
            if self.scheduled is None:
                raise ValueError("this Lambda handler has no drain route for scheduler events")
            return self.scheduled(event, context)
        shape = sorted(event)[:8] if isinstance(event, Mapping) else type(event).__name__
        raise ValueError(
            "drainpipe: not an HTTP event (no requestContext) nor a scheduled drain "
            f'(input {{"drainpipe": "drain"}} or a Scheduled Event); got {shape}'
        )


def lambda_handler(
    app: ASGIApp | None,
    *,
    route: DrainRoute | Callable[[], DrainRoute] | None = None,
    reserve: float = DEFAULT_RESERVE,
    max_budget: float | None = None,
    lifespan: Literal["auto", "on", "off"] = "off",
    api_gateway_base_path: str = "/",
) -> LambdaHandler:
    """A Lambda handler ``handler(event, context) -> dict``.

    HTTP events (API Gateway HTTP API v2, REST API, function URLs) go to ``app`` through
    mangum; with ``route`` (a :class:`DrainRoute` or a function building one), scheduler
    events run one drain (see :class:`ScheduledDrain`); any other event raises
    ``ValueError``. ``lifespan`` is mangum's (``"off"``: pools live as long as the warm
    process; ``"auto"``/``"on"`` would close them after every invocation).
    """
    return LambdaHandler(
        app,
        route=route,
        reserve=reserve,
        max_budget=max_budget,
        lifespan=lifespan,
        api_gateway_base_path=api_gateway_base_path,
    )


def scheduled_handler(
    route: DrainRoute | Callable[[], DrainRoute],
    *,
    reserve: float = DEFAULT_RESERVE,
    max_budget: float | None = None,
) -> LambdaHandler:
    """A Lambda handler for scheduler events only: one drain each (no mangum needed)."""
    return LambdaHandler(None, route=route, reserve=reserve, max_budget=max_budget)
