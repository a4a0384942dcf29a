"""``drainpipe jobs ...`` and ``drainpipe inbox ...``: look at and steer a live database.

Every command goes through the public Python API (``Jobs``, ``WebhookInbox``) on one
connection, so what an operator sees is what the library sees. The CLI has no payload
schemas: each queue it is given is declared as ``dict[str, Any]`` (dead letters are
returned as stored anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from ..errors import DrainpipeError, not_installed
from .arguments import positive_int

#: Seconds allowed for connecting, and for each statement or lock wait, by default.
DEFAULT_TIMEOUT = 30.0

QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
_QUEUE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,46}$")
_INBOX_STATUSES = ("pending", "processing", "processed", "dead")
# the longest last_error shown in a table cell; --json has all of it
_ERROR_WIDTH = 60


class UsageError(Exception):
    """A mistake in the command line found after parsing (exit status 2)."""


def _job_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id") from None
    if not 0 <= value <= 2**63 - 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id")
    return value


def _queue(text: str) -> str:
    if not _QUEUE_NAME.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a queue name (lowercase letters, digits and _, at most 47)"
        )
    return text


def _tenant(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "a tenant is a non-empty name (leave --tenant out for none)"
        )
    return text


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--database-url`` and ``--timeout``, shared by every command that connects."""
    parser.add_argument(
        "--database-url",
        default=None,
        metavar="URL",
        help="Postgres URL (default $DATABASE_URL)",
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=(
            "give up when connecting, one statement or one lock wait takes longer"
            f" (default {DEFAULT_TIMEOUT:g})"
        ),
    )


def _add_common(parser: argparse.ArgumentParser) -> None:
    add_connection_options(parser)
    parser.add_argument(
        "--json", action="store_true", help="print JSON instead of a table (for scripts)"
    )


def add_commands(commands: Any) -> None:
    """Register ``jobs`` and ``inbox`` on the top-level subparsers."""
    jobs = commands.add_parser("jobs", help="queue statistics and dead letters")
    jobs_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="COMMAND")

    stats = jobs_commands.add_parser(
        "stats", help="ready, in-flight, delayed and dead jobs per queue"
    )
    stats.add_argument(
        "--queue",
        dest="queues",
        action="append",
        type=_queue,
        metavar="QUEUE",
        help="only this queue (repeat for more; default: every queue in the database)",
    )
    _add_common(stats)

    dead = jobs_commands.add_parser("dead", help="list a queue's dead letters, newest first")
    dead.add_argument("queue", type=_queue, metavar="QUEUE", help="the queue")
    dead.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100, max 1000)"
    )
    dead.add_argument(
        "--before",
        type=_job_id,
        default=None,
        metavar="ID",
        help="only dead letters older than this id (the last id of the previous page)",
    )
    dead.add_argument(
        "--payload",
        action="store_true",
        help="include payloads and contexts in --json output (left out by default)",
    )
    _add_common(dead)

    retry = jobs_commands.add_parser(
        "retry", help="enqueue dead letters again (attempts start over)"
    )
    retry.add_argument("queue", type=_queue, metavar="QUEUE", help="the queue")
    retry.add_argument(
        "--id",
        dest="ids",
        action="append",
        nargs="+",
        type=_job_id,
        metavar="ID",
        help="only these dead letters (repeatable; default: the newest --limit)",
    )
    retry.add_argument(
        "--limit",
        type=positive_int,
        default=1000,
        help="at most this many (default 1000)",
    )
    _add_common(retry)

    inbox = commands.add_parser("inbox", help="stored webhook messages")
    inbox_commands = inbox.add_subparsers(dest="inbox_command", required=True, metavar="COMMAND")
    listing = inbox_commands.add_parser("list", help="a source's messages, newest first")
    listing.add_argument("source", metavar="SOURCE", help="the webhook source (e.g. stripe)")
    listing.add_argument(
        "--status", choices=_INBOX_STATUSES, default=None, help="only messages in this state"
    )
    listing.add_argument(
        "--tenant",
        type=_tenant,
        default=None,
        help="this tenant's messages (default: messages stored without a tenant)",
    )
    listing.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100, max 1000)"
    )
    _add_common(listing)


def database_url(args: argparse.Namespace) -> str:
    url: str | None = args.database_url or os.environ.get("DATABASE_URL")
    if not url:
        raise UsageError("pass --database-url or set DATABASE_URL")
    return url


async def run(args: argparse.Namespace) -> str:
    """Run a ``jobs``/``inbox`` command; the text to print."""
    from . import connect

    url = database_url(args)
    conn = await connect(url, timeout_seconds=args.timeout)
    try:
        if args.command == "inbox":
            return await _inbox_list(conn, args)
        if args.jobs_command == "stats":
            return await _jobs_stats(conn, args)
        if args.jobs_command == "dead":
            return await _jobs_dead(conn, args)
        return await _jobs_retry(conn, args)
    finally:
        await conn.close()


def _jobs_for(conn: Any, queues: Sequence[str]) -> Any:
    from ..jobs import Jobs

    return Jobs(conn, dict.fromkeys(queues, dict[str, Any]))


async def list_queues(conn: Any) -> list[str]:
    """The queues the database holds jobs or dead letters for, by name.

    Read from where each backend keeps its queues (``drainpipe.modules`` says which one is
    installed): pgmq's queue list, or the queues of the table backend's rows. There is no
    SQL function for it, so this reads tables, which stay put when functions are renamed.
    """
    present = await (
        await conn.execute(
            "SELECT to_regclass('drainpipe.modules') IS NOT NULL,"
            " to_regclass('drainpipe.job_messages') IS NOT NULL,"
            " to_regclass('pgmq.meta') IS NOT NULL"
        )
    ).fetchone()
    has_modules, has_table_backend, has_pgmq = present
    backend = None
    if has_modules:
        row = await (
            await conn.execute(
                "SELECT options ->> 'backend' FROM drainpipe.modules WHERE name = 'jobs'"
            )
        ).fetchone()
        backend = row[0] if row else None
    if backend is None:
        raise not_installed("drainpipe's jobs SQL is not installed in this database")
    if backend == "table" and has_table_backend:
        sql = (
            "SELECT queue FROM drainpipe.job_messages"
            " UNION SELECT queue FROM drainpipe.job_dead_letters ORDER BY 1"
        )
    elif backend == "pgmq" and has_pgmq:
        sql = "SELECT queue_name FROM pgmq.meta ORDER BY 1"
    else:
        return []
    rows = await (await conn.execute(sql)).fetchall()
    # pgmq may hold other applications' queues; only names drainpipe could have made
    return [row[0] for row in rows if _QUEUE_NAME.match(row[0])]


async def require_queues(conn: Any, queues: Sequence[str]) -> None:
    """``not_found`` ``QUEUE_NOT_FOUND`` for the first of ``queues`` this database has never
    held: a mistyped name fails loudly instead of printing an empty answer."""
    known = set(await list_queues(conn))
    unknown = [queue for queue in queues if queue not in known]
    if unknown and await _table_backend(conn):
        # the table backend keeps no queue list: a queue with no rows left may still be
        # named by its attempts' history or its policy
        unknown = [queue for queue in unknown if not await _table_queue_seen(conn, queue)]
    if unknown:
        raise DrainpipeError(
            "not_found",
            f'No queue "{unknown[0]}" in this database (drainpipe jobs stats lists its queues)',
            code=QUEUE_NOT_FOUND,
        )


async def _table_backend(conn: Any) -> bool:
    row = await (
        await conn.execute(
            "SELECT options ->> 'backend' = 'table' FROM drainpipe.modules WHERE name = 'jobs'"
        )
    ).fetchone()
    return bool(row and row[0])


async def _table_queue_seen(conn: Any, queue: str) -> bool:
    row = await (
        await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM drainpipe.job_attempts WHERE queue = %(q)s)"
            " OR EXISTS (SELECT 1 FROM drainpipe.queue_policies WHERE queue = %(q)s)",
            {"q": queue},
        )
    ).fetchone()
    return bool(row and row[0])


async def _jobs_stats(conn: Any, args: argparse.Namespace) -> str:
    if args.queues:
        await require_queues(conn, args.queues)
    queues = list(dict.fromkeys(args.queues)) if args.queues else await list_queues(conn)
    stats = await _jobs_for(conn, queues).stats() if queues else {}
    if args.json:
        return _json({queue: asdict(value) for queue, value in stats.items()})
    if not stats:
        return "no queues"
    return table(
        ["QUEUE", "READY", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST_AGE"],
        [
            [
                queue,
                s.ready,
                s.in_flight,
                s.delayed,
                s.dead,
                _age(s.oldest_age_seconds),
            ]
            for queue, s in stats.items()
        ],
    )


async def _jobs_dead(conn: Any, args: argparse.Namespace) -> str:
    await require_queues(conn, [args.queue])
    dead = await _jobs_for(conn, [args.queue]).list_dead(
        args.queue, limit=args.limit, cursor=args.before
    )
    if args.json:
        hidden = () if args.payload else ("payload", "context")
        return _json([{k: v for k, v in asdict(job).items() if k not in hidden} for job in dead])
    if not dead:
        return f"no dead letters in {args.queue}"
    return table(
        ["ID", "ATTEMPTS", "ENQUEUED_AT", "DIED_AT", "LAST_ERROR"],
        [
            [
                job.id,
                f"{job.attempts}/{job.max_attempts}",
                _when(job.enqueued_at),
                _when(job.died_at),
                _first_line(job.last_error),
            ]
            for job in dead
        ],
    )


async def _jobs_retry(conn: Any, args: argparse.Namespace) -> str:
    await require_queues(conn, [args.queue])
    ids = [job_id for group in args.ids for job_id in group] if args.ids else None
    report = await _jobs_for(conn, [args.queue]).retry_dead(args.queue, ids=ids, limit=args.limit)
    count = int(report)
    if args.json:
        refused = {str(job_id): code for job_id, code in report.refused.items()}
        return _json({"queue": args.queue, "retried": count, "refused": refused})
    text = f"retried {count} dead letter{'' if count == 1 else 's'} of {args.queue}"
    if report.refused:
        text += "; not replayed: " + ", ".join(
            f"#{job_id} {code}" for job_id, code in sorted(report.refused.items())
        )
    return text


async def _inbox_list(conn: Any, args: argparse.Namespace) -> str:
    from ..webhooks import WebhookInbox

    inbox = WebhookInbox(conn, source=args.source)
    entries = await inbox.list(tenant=args.tenant, status=args.status, limit=args.limit)
    if args.json:
        return _json([asdict(entry) for entry in entries])
    if not entries:
        return f"no messages from {args.source}"
    return table(
        ["ID", "MESSAGE_ID", "TYPE", "STATUS", "ATTEMPTS", "RECEIVED_AT", "LAST_ERROR"],
        [
            [
                e.id,
                e.message_id,
                e.type or "",
                e.status,
                f"{e.attempts}/{e.max_attempts}",
                _when(e.received_at),
                _first_line(e.last_error),
            ]
            for e in entries
        ],
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers in aligned columns; numbers right-aligned, text left."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int) for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        padded = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _json(value: Any) -> str:
    return json.dumps(value, default=_json_default, indent=2, ensure_ascii=False)


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for suffix, unit in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= unit:
            return f"{seconds / unit:.1f}{suffix}"
    return f"{seconds:.1f}s"


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= _ERROR_WIDTH else line[: _ERROR_WIDTH - 1] + "…"
