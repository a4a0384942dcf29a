"""What ``drainpipe dev`` prints: one line per failure as it happens, and a live status
line of queue stats that log lines never glue onto."""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..http import Receive, Scope, Send

if TYPE_CHECKING:
    from ..models import QueueStats

log = logging.getLogger("drainpipe.dev")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
DEFAULT_PGDATA = Path("~/.cache/drainpipe/dev-pgdata")


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


def dev_management_token(env: MutableMapping[str, str], name: str = "MANAGEMENT_TOKENS") -> str:
    """The Job Inbox's admin token for ``drainpipe dev``: when ``env[name]`` is unset, a new
    one is written there as ``<token>=dev@localhost:admin``; else the first token listed."""
    value = env.get(name)
    if value:
        return value.split(",", 1)[0].partition("=")[0].strip()
    token = "dev_" + secrets.token_urlsafe(24)
    env[name] = f"{token}=dev@localhost:admin"
    return token


def dev_executor_token(env: MutableMapping[str, str], name: str = "EXECUTOR_TOKENS") -> str:
    """The job executors' token for ``drainpipe dev``: when ``env[name]`` is unset, a new
    one is written there as ``<token>=*`` (every queue); else the first token listed."""
    value = env.get(name)
    if value:
        return value.split(",", 1)[0].partition("=")[0].strip()
    token = "exe_" + secrets.token_urlsafe(24)
    env[name] = f"{token}=*"
    return token


def dev_token(env: MutableMapping[str, str], name: str, prefix: str) -> str:
    """``env[name]`` when set; otherwise ``prefix`` + 32 random URL-safe characters, written
    there (the agent inbox's ``AGENT_TOKEN`` and ``AGENT_LEASE_SECRET``)."""
    value = env.get(name)
    if value:
        return value
    value = prefix + secrets.token_urlsafe(24)
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
