"""uvicorn in the current event loop, with a clear refusal when the port is taken."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..http import Receive, Scope, Send

if TYPE_CHECKING:
    import uvicorn


log = logging.getLogger("drainpipe.dev")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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


def websocket_protocol() -> str:
    """uvicorn's WebSocket implementation for the agent inbox's stream: the ``websockets``
    package's sans-I/O one when this uvicorn has it (its legacy one is deprecated), else
    whatever uvicorn picks."""
    import importlib.util

    if importlib.util.find_spec("websockets") is None:
        return "auto"
    try:
        found = importlib.util.find_spec("uvicorn.protocols.websockets.websockets_sansio_impl")
    except ImportError:
        return "auto"
    return "websockets-sansio" if found is not None else "auto"


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
        ws=websocket_protocol(),
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
