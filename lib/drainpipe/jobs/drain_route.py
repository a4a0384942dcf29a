"""The drain route a cron caller hits, and the loop that plays that caller locally.

A serverless function cannot run a worker forever, so a scheduler (Vercel Cron, GitHub
Actions, ``dev_drain``) calls :class:`DrainRoute` every minute: it enqueues due schedules,
then drains each handler's queue until its time budget is spent, and answers a JSON report.

Fairness. One call's budget is shared by every queue and inbox: each gets an equal share
of what is left when its turn comes, so time a source leaves unused goes to the ones after
it, and sources still busy when their share ended get further rounds while budget is left.
A backlog in one queue never starves another queue or a webhook inbox.

Loud failures. When the database never answers, or drainpipe's SQL is missing, the call
answers a 503 Problem (kind ``network``, or code ``NOT_INSTALLED`` with a hint to run
``drainpipe sql apply``) with ``"more": false``, and logs the cause on the ``drainpipe``
logger. Before the database answered once, claim errors are not retried, so this takes
one failed connection, not the retry waits. One source failing while others work stays a
200 report with ``errors``. See ``docs/engine.md``.

Leases. A job claimed by the route is leased for at least the time left in the budget
plus ``lease_margin`` seconds (30 by default), re-evaluated at each claim and heartbeat, and
the heartbeat beats every ``lease_margin / 3`` seconds. So while a handler runs, even past
the budget, its lease always reaches ``lease_margin`` seconds ahead, and the next cron call
cannot claim the same job. A ``lease`` option larger than that is used as is. A queue
with a :class:`~drainpipe.QueuePolicy` is claimed with the policy's ``lease`` instead (never
over its ``max_lease``), and heartbeats keep a long handler's job held.

Scoped executors. ``secret`` may be a mapping ``{token: [queue, ...]}``: a call drains only
its token's queues (and inboxes named there); due schedules run for any valid token.

Retention. When ``Jobs`` has policies, a call applies their retention at most once an hour
per database (``jobs.apply_retention_if_due``); live jobs are never touched.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..engine.core import RunOptions, budget_spent, fair_share_deadline, route_lease
from ..engine.runner import call_hook, log_error
from ..errors import NOT_INSTALLED, SCHEMA_NOT_EXPOSED, DrainpipeError
from ..http import (
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
from ..models import WorkReport
from ..telemetry import SYSTEM, active_telemetry
from ..validation import positive_int, seconds
from .drain_tokens import EVERYTHING, DrainCredentials, allowed
from .drain_unavailable import DrainUnavailable
from .pause import idle_holds
from .worker import Worker

if TYPE_CHECKING:
    from . import Handler, Jobs, OnError

log = logging.getLogger("drainpipe.drain")


ALLOW = "GET, POST"
UNAUTHORIZED_DETAIL = "The drain route needs its bearer secret"
DEFAULT_LEASE_MARGIN = 30.0


def _option_error(exc: DrainpipeError) -> ValueError:
    return ValueError(str(exc))


class DrainRoute:
    """An ASGI app (the object itself) that runs due schedules and drains queues.

    Build it with :meth:`drainpipe.Jobs.drain_route`. ``handlers`` maps queue → handler in
    drain order; ``budget`` is the seconds one call may spend claiming (claimed jobs always
    finish), shared fairly by every source; ``inboxes`` is an optional sequence of
    ``(WebhookInbox, handler)`` pairs, each given its turn after the queues in every round.
    ``on_error(error, job_or_message_or_None)`` hears of every failure (default: logged).
    ``monitor.on_start`` gets the request given to :meth:`handle` (or, as an ASGI app, a
    :class:`MonitorRequest`). ``lease`` (seconds, optional) is a floor; see the module docstring.
    Construction raises ``ValueError`` for an empty secret or an undeclared queue.
    """

    def __init__(
        self,
        jobs: Jobs,
        *,
        secret: str | Mapping[str, Sequence[str]] | None = None,
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
        step_margin: float = 5.0,
    ) -> None:
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
            # a job's steps suspend (eligible again at once) when less than this is left of
            # the budget, so a long workflow goes on at the next call instead of overrunning
            self.step_margin = seconds(step_margin, "step_margin")
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
        self._credentials = DrainCredentials(secret, [*handlers, *sources])
        self.handlers = dict(handlers)
        self.schedules = schedules
        self.on_error = on_error
        self.monitor = monitor
        self.all_tenants = all_tenants
        self.problem = problem

    # -- HTTP ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def handle(request: Request) -> Response:
            return await self._handle(request, MonitorRequest.from_asgi(scope, request))

        await run_asgi(handle, scope, receive, send)

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
        scope = self._credentials.scope(request.headers.get("authorization"))
        if scope is None:
            # before anything else: a stranger costs no database call and no monitor hook
            error = DrainpipeError("unauthorized", UNAUTHORIZED_DETAIL)
            return problem_response(error, request.path, problem=self.problem)
        try:
            result = await self.run(original if original is not None else request, scope=scope)
        except DrainUnavailable as unavailable:
            return unavailable.response(request.path, self.problem)
        return json_response(result)

    def authorized(self, header: str | None) -> bool:
        """True when ``header`` (an ``Authorization`` value) carries the secret or one of
        the executor tokens, with or without a case-insensitive ``Bearer `` prefix.
        Constant time in the secrets (see :mod:`drainpipe.jobs.drain_tokens`)."""
        return self._credentials.scope(header) is not None

    # -- one drain -------------------------------------------------------------------------

    async def run(
        self, request: Any = None, *, scope: frozenset[str] = EVERYTHING
    ) -> dict[str, Any]:
        """Run schedules and drain the queues and inboxes once (no authorization check).

        Returns ``{"schedules", "queues": {queue: {"succeeded", "failed"}},
        "budgetExhausted", "errors", "more"}`` plus ``"paused": [queues]`` when a drained
        queue is paused (docs/policies.md#pause) and ``"held": {queue: {reason: n}}`` when one
        that gave no work has held jobs, plus ``"inboxes": {source: {...}}`` when
        inboxes are set. The budget is shared: each source with work gets an equal share of
        what is left, and time a source leaves unused goes to the others, round after round
        (see ``docs/engine.md``). A source not reached before the deadline is left out;
        ``more`` says a source stopped by the deadline (or unreached) still had work.

        Raises :class:`DrainUnavailable` when the drain could not work at all: the
        database never answered (kind ``network``) or drainpipe's SQL is missing (code
        ``NOT_INSTALLED``); the route answers it as a 503 Problem with ``"more": false``.
        """
        if (otel := active_telemetry()) is None:
            return await self._run(request, scope)
        attributes = {
            "messaging.system": SYSTEM,
            "drainpipe.drain.budget": self.budget,
            "drainpipe.drain.queues": list(self.handlers),
        }
        started = asyncio.get_running_loop().time()
        try:
            with otel.span("drainpipe.drain", attributes) as span:
                result = await self._run(request, scope)
                span.set_attribute("drainpipe.drain.more", bool(result.get("more")))
                span.set_attribute("drainpipe.drain.errors", int(result.get("errors") or 0))
                return result
        finally:
            if self.budget > 0:
                used = (asyncio.get_running_loop().time() - started) / self.budget
                otel.drain_budget_used.record(used)

    async def _run(self, request: Any, scope: frozenset[str]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.budget

        def lease() -> float:
            # never shorter than the rest of the budget plus a margin, even past the deadline
            return route_lease(loop.time(), deadline, self.lease_floor, self.lease_margin)

        token = await self._monitor("on_start", request)
        drain = _Drain(self)
        if self._runs_schedules():
            try:
                drain.scheduled = int(await self.jobs.run_schedules())
                drain.reached = True
            except Exception as exc:
                await drain.failed(exc, token)
        await self._retention(drain, token)

        sources = [
            _Source(queue, handler, None)
            for queue, handler in self.handlers.items()
            if allowed(scope, queue)
        ]
        sources += [
            _Source(inbox.source, handler, inbox)
            for inbox, handler in self.inboxes
            if allowed(scope, inbox.source)
        ]
        pending = sources  # a round gives each of them a share of what is left
        while pending:
            exhausted: list[_Source] = []
            for index, source in enumerate(pending):
                now = loop.time()
                if budget_spent(now, deadline):
                    break
                share = fair_share_deadline(now, deadline, len(pending) - index)
                if source.suspended and share - now < self.step_margin:
                    # its last run suspended jobs (a step under the budget rule): a share
                    # shorter than the margin would claim them only to replay and suspend
                    # them again, over and over until the deadline; the next call goes on
                    continue
                source.reached = True
                try:
                    report = await self._drain_one(source, share, lease, drain.reached)
                except Exception as exc:
                    await drain.failed(exc, token)
                    source.done = True
                    continue
                drain.reached = True
                source.succeeded += report.succeeded
                source.failed += report.failed
                source.suspended = report.suspended > 0
                if report.budget_exhausted:
                    exhausted.append(source)
                else:
                    source.done = True
            if budget_spent(loop.time(), deadline):
                break
            pending = exhausted
        if drain.missing is not None:
            await drain.unavailable(drain.missing, token)

        queues = {s.name: s.counts() for s in sources if s.inbox is None and s.reached}
        inboxes = {s.name: s.counts() for s in sources if s.inbox is not None and s.reached}
        unfinished = [s.name for s in sources if s.inbox is None and not s.done]
        inbox_more = any(s.inbox is not None and not s.done for s in sources)
        result: dict[str, Any] = {
            "schedules": drain.scheduled,
            "queues": queues,
            "budgetExhausted": loop.time() >= deadline or bool(unfinished) or inbox_more,
            "errors": drain.errors,
            "more": inbox_more or await self._has_ready(unfinished),
        }
        if self.inboxes:
            result["inboxes"] = inboxes
        paused, held = await idle_holds(
            self.jobs.driver,
            [
                s.name
                for s in sources
                if s.inbox is None and s.reached and not s.succeeded + s.failed
            ],
        )
        if paused:  # only then: a report without a paused queue reads as it always did
            result["paused"] = paused
        if held:  # {queue: {reason: n}} (docs/flow-control.md#what-held-means), likewise
            result["held"] = held
        await self._monitor("on_finish", result, token)
        return result

    async def _drain_one(
        self, source: _Source, deadline: float, lease: Callable[[], float], reached: bool
    ) -> WorkReport:
        """Drain one queue or inbox until ``deadline`` (its share of the budget). Before the
        database answered once in this call, a claim error is not retried: an unreachable
        database is a 503 at once, not after the retry waits."""
        if source.inbox is None:
            beat = self.lease_margin / 3
            policy = getattr(self.jobs, "policy", lambda queue: None)(source.name)
            queue_lease: float | Callable[[], float] = lease
            if policy is not None:
                # a lease of the policy's length, kept alive by heartbeats, instead of one
                # sized to the budget (which could pass max_lease)
                queue_lease = policy.lease
                beat = min(beat, policy.lease / 3)
            options = RunOptions.checked(
                concurrency=self.concurrency,
                batch=self.batch,
                lease=queue_lease,
                on_error=self.on_error,
                all_tenants=self.all_tenants,
                deadline=deadline,
                heartbeat_every=beat,
                step_margin=self.step_margin,
            )
            worker = Worker(
                self.jobs, source.name, source.handler, options, retry_unreached=reached
            )
            return await worker.run(until_empty=True)
        make_runner = getattr(source.inbox, "_runner", None)
        if make_runner is None:  # an inbox-like object of the caller's own
            report: WorkReport = await source.inbox.process(
                source.handler, deadline=deadline, lease=lease()
            )
            return report
        runner = make_runner(
            source.handler,
            lease=lease,
            deadline=deadline,
            on_error=self.on_error,
            heartbeat_every=self.lease_margin / 3,
            retry_unreached=reached,
        )
        return await runner.run(until_empty=True)  # type: ignore[no-any-return]

    async def _retention(self, drain: _Drain, token: Any) -> None:
        """The policies' retention, at most hourly per database (skipped without policies)."""
        apply = getattr(self.jobs, "apply_retention_if_due", None)
        if apply is None or not getattr(self.jobs, "policies", None):
            return
        try:
            deleted = await apply()
            drain.reached = True
        except Exception as exc:
            await drain.failed(exc, token)
            return
        if deleted:
            log.info("drainpipe: retention deleted %d terminal records", deleted)

    def _runs_schedules(self) -> bool:
        if not self.schedules or not callable(getattr(self.jobs, "run_schedules", None)):
            return False
        # pg_cron enqueues in the database itself; a storage without schedules has none
        # (and no call to it must count as the database answering)
        if getattr(self.jobs, "scheduler", "drain") == "pg_cron":
            return False
        return "due_schedules" not in self.jobs.driver.lacks

    async def _has_ready(self, queues: list[str]) -> bool:
        """One stats round trip, only when the deadline cut a queue short."""
        if not queues:
            return False
        try:
            stats = await self.jobs.stats(queues)
        except Exception:
            log.warning("drainpipe: could not tell whether work is left", exc_info=True)
            return True  # the deadline stopped us while claims still returned work
        # held jobs (paused, or over a flow limit) are not work another call could do now
        return any(stat.ready > sum(stat.held.values()) for stat in stats.values())

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
            if self.on_error is None:
                log_error(f"the drain route's monitor ({name})", exc, logger=log)
            else:
                await call_hook(self.on_error, exc, None)
            return None


class RequestURL(NamedTuple):
    """The URL parts of a :class:`MonitorRequest`."""

    path: str
    query: str


class MonitorRequest:
    """What a monitor's ``on_start(request)`` gets when the route runs as an ASGI app:
    ``method``, ``url.path``, ``url.query``, ``headers`` (case-insensitive ``get`` and
    ``[]``) and the ASGI ``scope``, like a Starlette request. Through
    ``route.handle(request)`` the hook gets the caller's own request object instead."""

    __slots__ = ("headers", "method", "scope", "url")

    def __init__(self, method: str, url: RequestURL, headers: Any, scope: Scope) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.scope = scope

    @classmethod
    def from_asgi(cls, scope: Scope, request: Request) -> MonitorRequest:
        query = scope.get("query_string", b"")
        text = query.decode("latin-1") if isinstance(query, bytes) else str(query)
        return cls(request.method, RequestURL(request.path, text), request.headers, scope)

    def __repr__(self) -> str:
        return f"MonitorRequest({self.method} {self.url.path})"


class _Source:
    """One queue (``inbox`` None) or webhook inbox of a drain, and what it did so far."""

    __slots__ = ("done", "failed", "handler", "inbox", "name", "reached", "succeeded", "suspended")

    def __init__(self, name: str, handler: Any, inbox: Any) -> None:
        self.name = name
        self.handler = handler
        self.inbox = inbox
        self.succeeded = 0
        self.failed = 0
        self.reached = False  # given a share: it is in the report
        self.done = False  # ran out of work (or failed): nothing more to give it
        self.suspended = False  # its last run suspended jobs (steps: sleep, wait, budget)

    def counts(self) -> dict[str, int]:
        return {"succeeded": self.succeeded, "failed": self.failed}


class _Drain:
    """The state of one drain call: what it counted, whether the database answered yet."""

    def __init__(self, route: DrainRoute) -> None:
        self.route = route
        self.scheduled = 0
        self.errors = 0
        self.reached = False  # a statement of this call got an answer
        self.missing: DrainUnavailable | None = None  # SQL found missing after first contact

    async def failed(self, exc: BaseException, token: Any) -> None:
        """Count one source's failure, or end the call when the drain cannot work."""
        error = DrainUnavailable.from_cause(exc)
        if error is not None and not self.reached:
            await self.unavailable(error, token)
        if error is not None and error.code in (NOT_INSTALLED, SCHEMA_NOT_EXPOSED):
            # part of the SQL is missing (one module not applied): the sources that work
            # still run, then the call answers the 503
            self.missing = self.missing or error
        self.errors += 1
        on_error = self.route.on_error
        if on_error is None:
            log_error("drain route", exc, logger=log)
        else:
            await call_hook(on_error, exc, None)

    async def unavailable(self, error: DrainUnavailable, token: Any) -> None:
        log.error("drainpipe: the drain route cannot work: %s", error, exc_info=error)
        if self.route.on_error is not None:
            await call_hook(self.route.on_error, error, None)
        await self.route._monitor("on_finish", error.body(), token)
        raise error
