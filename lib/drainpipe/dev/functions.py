"""Serving a folder of function files exactly as Vercel does: ``api/drain.py`` at
``/api/drain``, plus vercel.json's ``rewrites``; ``drainpipe dev`` and ``drainpipe serve`` use it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DrainpipeError
from ..http import Receive, Scope, Send, problem_response, serve_lifespan

if TYPE_CHECKING:
    pass

log = logging.getLogger("drainpipe.dev")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: how long a function's ``startup()`` may take before the server listens without it
STARTUP_SECONDS = 10.0


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
    the client asked for, as on Vercel. Lifespan startup awaits every app's ``startup()``
    (when it has one; a line it returns is kept in :attr:`notes` for the banner) and
    lifespan shutdown closes every app that has an ``aclose()``.
    """

    directory: Path
    apps: dict[str, ASGIApp] = field(default_factory=dict)  # URL path → app
    files: dict[str, Path] = field(default_factory=dict)  # URL path → file
    rewrites: list[tuple[str, re.Pattern[str], str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stopping: bool = False  # set on Ctrl-C: calls cancelled from then on are expected
    notes: list[str] = field(default_factory=list)  # what the apps' startup() reported

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
            await serve_lifespan(receive, send, self.aclose, on_startup=self.startup)
            return
        if scope["type"] not in ("http", "websocket"):
            return
        app = self.match(scope.get("path", "/"))
        if app is None and scope["type"] == "websocket":  # refused before the handshake
            await send({"type": "websocket.close", "code": 1008})
            return
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

    async def startup(self) -> None:
        """Run each app's ``startup()`` once, as the server starts (the example's agent
        inbox is created then, so webhooks reach it before any agent calls). A failure is
        logged and leaves that app to do its work on its first request instead."""
        started: set[int] = set()  # two files may serve one app: start it once
        for route, app in self.apps.items():
            start = getattr(app, "startup", None)
            if not callable(start) or id(app) in started:
                continue
            started.add(id(app))
            try:
                # bounded: an unreachable database must not keep the server from listening
                note = await asyncio.wait_for(start(), STARTUP_SECONDS)
            except Exception as exc:  # TimeoutError included
                reason = str(exc) or f"no answer within {STARTUP_SECONDS:g} s"
                log.warning("%s: startup failed: %s", self.files[route].name, reason)
                continue
            if note:
                self.notes.append(str(note))

    async def aclose(self) -> None:
        for app in self.apps.values():
            close = getattr(app, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.warning("closing a function failed", exc_info=True)
