"""Long-running processes for a container: ``drainpipe serve`` and ``drainpipe work``.

``drainpipe serve`` serves the ``functions/`` folder (the routes ``drainpipe dev`` serves,
through :class:`drainpipe.dev.functions.FunctionsApp`) on uvicorn, plus ``GET /healthz``; no
embedded database and no dev drain: the platform's cron (or ``drainpipe work``) drains.
SIGTERM or SIGINT: stop accepting, let requests in flight finish (up to ``--graceful``
seconds), run lifespan shutdown (which closes the functions' pools), exit 0.

``drainpipe work QUEUE... --app module:attr`` runs ``Jobs.work`` for each queue until
SIGTERM/SIGINT, which sets the stop event: no new claims, the claimed jobs finish, exit 0.
Jobs still running ``--grace`` seconds later are cancelled; their leases run out and they
are claimed again (never lost, never completed twice). ``attr`` names a :class:`WorkerApp`
(or any object with ``jobs`` and ``handlers``, such as a ``DrainRoute``), or a function of
no arguments (plain or async) that returns one, so importing the module needs no
configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .http import Receive, Scope, Send, json_response

if TYPE_CHECKING:
    import uvicorn

    from .jobs import Handler, Jobs, OnError


log = logging.getLogger("drainpipe.serve")

HEALTH_PATH = "/healthz"
DEFAULT_GRACEFUL = 25  # seconds; under Kubernetes' default terminationGracePeriodSeconds (30)


# -- drainpipe serve ---------------------------------------------------------------------


class WithHealthCheck:
    """``GET /healthz`` answers 200 ``{"ok": true}`` without touching the database (a
    liveness probe must not fail, and restart the container, because Postgres is slow);
    every other request goes to ``app``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") == HEALTH_PATH:
            await json_response({"ok": True})(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _server(config: uvicorn.Config, listening: asyncio.Event) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        # our loop handlers own SIGTERM/SIGINT: uvicorn's would raise the signal again
        # after its graceful shutdown, so the process would end by the signal, not with 0
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                listening.set()

    return Server(config)


async def serve(
    functions: Path | str = "functions",
    *,
    host: str = "0.0.0.0",  # noqa: S104 - a container listens on every interface
    port: int = 8000,
    graceful: int = DEFAULT_GRACEFUL,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Serve ``functions`` until SIGTERM/SIGINT (or ``stop``); returns after the graceful
    shutdown. A second signal forces the exit without waiting for requests in flight."""
    try:
        import uvicorn
    except ImportError as exc:
        raise SystemExit("drainpipe serve runs on uvicorn: pip install 'drainpipe[serve]'") from exc
    from .dev.functions import FunctionsApp
    from .dev.server import websocket_protocol

    app = FunctionsApp.load(functions)
    config = uvicorn.Config(
        WithHealthCheck(app),
        host=host,
        port=port,
        lifespan="on",
        timeout_graceful_shutdown=graceful,
        log_level="info",
        ws=websocket_protocol(),  # the agent inbox's stream
        # X-Forwarded-* are trusted from FORWARDED_ALLOW_IPS only (uvicorn's default: local)
    )
    listening = asyncio.Event()
    server = _server(config, listening)
    stop = stop or asyncio.Event()

    def shutdown() -> None:
        if server.should_exit:
            server.force_exit = True  # a second signal: do not wait any longer
        server.should_exit = True
        stop.set()

    async def watch_stop() -> None:
        await stop.wait()
        server.should_exit = True

    with _signals(shutdown):
        watcher = asyncio.create_task(watch_stop())
        serving = asyncio.create_task(server.serve())
        try:
            started = asyncio.create_task(listening.wait())
            await asyncio.wait([started, serving], return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            if server.started:
                bound = server.servers[0].sockets[0].getsockname()
                print(f"drainpipe serve: listening on http://{host}:{bound[1]}", flush=True)
                for path, file in app.routes().items():
                    print(f"  {path}  ({file})", flush=True)
                print(f"  {HEALTH_PATH}  (health check)", flush=True)
                for note in app.notes:
                    print(f"  started: {note}", flush=True)
                if ready is not None:
                    ready.set()
            await serving
        finally:
            watcher.cancel()
    print("drainpipe serve: stopped", flush=True)


@contextlib.contextmanager
def _signals(handler: Any) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


# -- drainpipe work ----------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerApp:
    """What ``drainpipe work --app module:attr`` runs: a :class:`drainpipe.Jobs` and the
    handler of each queue (queue → ``async def handler(payload, job)``). ``lease`` (seconds)
    applies to every queue; ``on_error`` is passed to ``Jobs.work``."""

    jobs: Jobs
    handlers: Mapping[str, Handler]
    lease: float = 300
    on_error: OnError | None = None


def import_app(spec: str) -> Any:
    """The object named by ``module:attr`` (``attr`` may be dotted); ``ValueError`` when
    the spec is malformed or names nothing. The current folder is importable."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--app must be module:attr (such as myapp.jobs:worker), not {spec!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"--app {spec}: cannot import {module_name} ({exc})") from exc
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"--app {spec}: {module_name} has no {attr}") from None
    return value


async def resolve_worker_app(value: Any) -> Any:
    """``value`` itself when it has ``jobs`` and ``handlers``, else what calling it returns."""
    if not (hasattr(value, "jobs") and hasattr(value, "handlers")) and callable(value):
        value = value()
        if inspect.isawaitable(value):
            value = await value
    if not (hasattr(value, "jobs") and isinstance(getattr(value, "handlers", None), Mapping)):
        raise ValueError(
            "--app must name a drainpipe.serve.WorkerApp (an object with jobs and handlers),"
            f" or a function returning one; got {type(value).__name__}"
        )
    return value


async def work(
    app: Any,
    queues: Sequence[str] = (),
    *,
    concurrency: int = 1,
    batch: int = 1,
    lease: float | None = None,
    grace: float = DEFAULT_GRACEFUL,
    schedules_every: float | None = None,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Work ``queues`` (default: every queue of ``app.handlers``) until ``stop`` is set or
    SIGTERM/SIGINT arrives; the :class:`WorkReport` of each queue. ``schedules_every``
    (seconds): also enqueue due schedules that often (safe in several workers at once).
    Raises what a worker raised (a claim error it could not retry); ``ValueError`` for a
    queue without handler."""
    worker_app = await resolve_worker_app(app)
    handlers: Mapping[str, Any] = worker_app.handlers
    chosen = list(dict.fromkeys(queues)) or list(handlers)
    missing = [queue for queue in chosen if queue not in handlers]
    if missing:
        raise ValueError(
            f"no handler for queue(s) {', '.join(missing)}; the app handles: "
            f"{', '.join(handlers) or 'nothing'}"
        )
    if not chosen:
        raise ValueError("the app has no handlers: nothing to work")
    jobs = worker_app.jobs
    lease_seconds = lease if lease is not None else getattr(worker_app, "lease", None) or 300
    stop = stop or asyncio.Event()
    tasks = {
        queue: asyncio.create_task(
            jobs.work(
                queue,
                handlers[queue],
                concurrency=concurrency,
                batch=batch,
                lease=lease_seconds,
                stop=stop,
                on_error=getattr(worker_app, "on_error", None),
            ),
            name=f"drainpipe-work-{queue}",
        )
        for queue in chosen
    }
    scheduler = (
        None
        if schedules_every is None
        else asyncio.create_task(_run_schedules(jobs, schedules_every, stop))
    )
    print(
        f"drainpipe work: {', '.join(chosen)} (concurrency {concurrency}, batch {batch}, "
        f"lease {lease_seconds:g} s)",
        flush=True,
    )
    signals: list[int] = []

    def on_signal(sig: int) -> None:
        signals.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
    try:
        pending = await _until_stopped(tasks, stop)
        if pending:
            cause = signal.Signals(signals[0]).name if signals else "a worker stopped"
            print(
                f"drainpipe work: {cause}: no new claims, waiting up to {grace:g} s for"
                " running jobs",
                flush=True,
            )
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            # their jobs' leases run out and they are claimed again
            log.warning("jobs still running after %s s: cancelling %s", grace, task.get_name())
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)
        stop.set()
        reports: dict[str, Any] = {}
        failure: BaseException | None = None
        for queue, task in tasks.items():
            if task.cancelled():
                continue
            error = task.exception()
            if error is not None:
                failure = failure or error
                continue
            reports[queue] = task.result()
        if failure is not None:
            # a worker stopped on an error it could not retry: the others stopped with it
            for task in tasks.values():
                task.cancel()
            raise failure
        return reports
    finally:
        if scheduler is not None:
            scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scheduler
        for sig in installed:
            loop.remove_signal_handler(sig)
        with contextlib.suppress(Exception):
            await jobs.close()


async def _run_schedules(jobs: Any, every: float, stop: asyncio.Event) -> None:
    """Enqueue due schedules every ``every`` seconds until ``stop``; failures are logged
    (the next round retries) so a database hiccup does not stop the workers."""
    while not stop.is_set():
        try:
            enqueued = await jobs.run_schedules()
            if enqueued:
                log.info("enqueued %s scheduled run(s)", enqueued)
        except Exception:
            log.warning("running due schedules failed; retrying in %s s", every, exc_info=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def _until_stopped(
    tasks: Mapping[str, asyncio.Task[Any]], stop: asyncio.Event
) -> set[asyncio.Task[Any]]:
    """Wait until ``stop`` is set or a worker ends (an error stops all of them); the
    workers still running."""
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([*tasks.values(), stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if any(task.done() and not task.cancelled() and task.exception() for task in tasks.values()):
        stop.set()  # one worker failed: stop the others too
    return {task for task in tasks.values() if not task.done()}


# -- the command line -------------------------------------------------------------------


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from .cli.arguments import port, positive_int

    parser.add_argument(
        "--functions",
        default="api",
        help="function files served as Vercel serves them (default ./api, as drainpipe dev)",
    )
    parser.add_argument("--host", default="0.0.0.0", help="interface (default 0.0.0.0)")  # noqa: S104
    parser.add_argument("--port", type=port, default=8000, help="HTTP port (default 8000)")
    parser.add_argument(
        "--graceful",
        type=positive_int,
        default=DEFAULT_GRACEFUL,
        help=f"seconds requests in flight may take after SIGTERM (default {DEFAULT_GRACEFUL})",
    )


def add_work_arguments(parser: argparse.ArgumentParser) -> None:
    from .cli.arguments import positive_int, seconds

    parser.add_argument(
        "queues", nargs="*", metavar="QUEUE", help="queues to work (default: all the app handles)"
    )
    parser.add_argument(
        "--app",
        default=os.environ.get("DRAINPIPE_APP"),
        help="module:attr of a drainpipe.serve.WorkerApp, or of a function returning one"
        " (default $DRAINPIPE_APP)",
    )
    parser.add_argument("--concurrency", type=positive_int, default=1, help="lanes per queue")
    parser.add_argument("--batch", type=positive_int, default=1, help="jobs per claim")
    parser.add_argument(
        "--lease", type=seconds, default=None, help="lease seconds (default: the app's, 300)"
    )
    parser.add_argument(
        "--schedules",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="also enqueue due schedules every SECONDS (default: off; the drain route runs them)",
    )
    parser.add_argument(
        "--grace",
        type=seconds,
        default=float(DEFAULT_GRACEFUL),
        help=f"seconds running jobs may take after SIGTERM (default {DEFAULT_GRACEFUL})",
    )


def _logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("drainpipe").setLevel(logging.INFO)


def serve_command(args: argparse.Namespace) -> int:
    """``drainpipe serve``; the exit status."""
    _logging()
    if not Path(args.functions).is_dir():
        print(
            f"drainpipe serve: no functions folder at {Path(args.functions).resolve()}",
            file=sys.stderr,
        )
        return 2
    asyncio.run(serve(args.functions, host=args.host, port=args.port, graceful=args.graceful))
    return 0


def work_command(args: argparse.Namespace) -> int:
    """``drainpipe work``; the exit status (0 after a signal, 1 when a worker failed)."""
    _logging()
    if not args.app:
        print(
            "drainpipe work: pass --app module:attr (or set DRAINPIPE_APP), such as"
            " --app worker:worker",
            file=sys.stderr,
        )
        return 2
    try:
        app = import_app(args.app)
    except ValueError as exc:
        print(f"drainpipe work: {exc}", file=sys.stderr)
        return 2
    try:
        reports = asyncio.run(
            work(
                app,
                args.queues,
                concurrency=args.concurrency,
                batch=args.batch,
                lease=args.lease,
                grace=args.grace,
                schedules_every=args.schedules,
            )
        )
    except ValueError as exc:
        print(f"drainpipe work: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"drainpipe work: a worker stopped: {exc}", file=sys.stderr)
        return 1
    for queue, report in reports.items():
        print(
            f"drainpipe work: {queue}: {report.succeeded} succeeded, {report.failed} failed",
            flush=True,
        )
    return 0
