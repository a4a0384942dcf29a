"""The console's routes of the management app (docs/job-inbox.md#the-console): the queue
overview, pause and resume, the search filters of ``GET /jobs``, bulk cancel and replay,
and ``/metrics`` in the Prometheus text format. Metadata only, as the rest of the app.

| route | who | answer |
| --- | --- | --- |
| ``GET /queues`` | viewer | one summary per declared queue |
| ``POST /queues/{queue}/pause``, ``/resume`` | admin | audited; 200 the queue's summary |
| ``POST /jobs/bulk/cancel``, ``/jobs/bulk/replay`` | admin | ``Idempotency-Key``; ``{"filter", "expected"}`` |
| ``GET /metrics`` | viewer, or the ``metrics_token`` | Prometheus text |
| ``GET /inboxes`` | viewer | given ``agents``: one summary per agent inbox |
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..backends import pause_statements as pause_ops
from ..errors import DrainpipeError, invalid_request
from ..http import Response, request_path
from ..validation import INT8_MAX, text_fault
from . import console_statements as ops
from .console_statements import JobFilter, QueueOverview
from .record_json import STATES, record_json

if TYPE_CHECKING:
    from ..agents import AgentInboxes
    from ..models import JobRecord
    from ..principals import Principal
    from .management_app import ManagementApp

FILTER_INVALID = "FILTER_INVALID"
BULK_TOO_LARGE = "BULK_TOO_LARGE"
BULK_COUNT_CHANGED = "BULK_COUNT_CHANGED"
BODY_INVALID = "BODY_INVALID"
BODY_TOO_LARGE = "BODY_TOO_LARGE"
#: the most jobs one bulk call acts on
MAX_BULK = 10_000
#: the largest request body the console reads (a bulk call's filter)
MAX_BODY = 64 * 1024
#: codes that say a job's attempts ran out; its cause is its last attempt's code
_SPENT = ("MAX_ATTEMPTS", "DEADLINE_PASSED")
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_BULK_FILTER_KEYS = ("queue", "state", "tenant", "code", "since", "until")
#: ``GET /jobs``'s console filters (section 10's are queue, state and tenant)
SEARCH_KEYS = ("id", "dedupe_key", "code", "since", "until")
_TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class BulkCountChanged(DrainpipeError):
    """409 ``BULK_COUNT_CHANGED``: the Problem carries ``"meta": {"count": n}``, what the
    filter matches now, so the caller can confirm that number instead."""

    def __init__(self, count: int, expected: int) -> None:
        super().__init__(
            "conflict",
            f"The filter matches {count} jobs now, not {expected}",
            code=BULK_COUNT_CHANGED,
        )
        self.meta = {"count": count}


def _bad_filter(message: str) -> DrainpipeError:
    return invalid_request(message, code=FILTER_INVALID)


def parse_code(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or not _CODE.fullmatch(raw):
        raise _bad_filter("code must match ^[A-Z][A-Z0-9_]{0,63}$")
    return raw


def parse_instant(raw: Any, name: str) -> datetime | None:
    """An ISO 8601 instant (a time without an offset is UTC)."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or len(raw) > 40:
        raise _bad_filter(f"{name} must be an ISO 8601 time, e.g. 2026-12-03T08:00:00Z")
    try:
        value = datetime.fromisoformat(raw.strip().replace(" ", "T", 1))
    except ValueError:
        raise _bad_filter(f"{name} must be an ISO 8601 time, e.g. 2026-12-03T08:00:00Z") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_job_id(raw: Any) -> int | None:
    if raw is None or raw == "":
        return None
    text = str(raw).strip()
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) > INT8_MAX:
        raise _bad_filter("id must be a job id (a non-negative integer)")
    return int(text)


def _text(raw: Any, name: str, longest: int) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or len(raw) > longest or text_fault(raw) is not None:
        raise _bad_filter(f"{name} must be at most {longest} characters of text")
    return raw


def _check_span(since: datetime | None, until: datetime | None) -> None:
    if since is not None and until is not None and until <= since:
        raise _bad_filter("until must be after since")


def overview_json(summary: QueueOverview) -> dict[str, Any]:
    """A queue's summary as ``GET /queues`` answers it. ``held`` counts the jobs that could
    run but are held, by reason, as ``QueueStats.held`` does: all the ready ones
    (``"paused"``) while paused, else those its flow limits hold."""
    return {
        "queue": summary.queue,
        "counts": summary.counts,
        "paused": summary.paused,
        "oldest_ready_age_s": summary.oldest_ready_age_s,
        "held": (
            {"paused": summary.ready} if summary.paused and summary.ready else dict(summary.held)
        ),
        "series": summary.series,
    }


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(summaries: list[QueueOverview]) -> str:
    """The metrics of the queues' summaries in the Prometheus text format (0.0.4)."""
    lines = [
        "# HELP drainpipe_jobs Jobs kept as records, by queue and state.",
        "# TYPE drainpipe_jobs gauge",
    ]
    for summary in summaries:
        for state in STATES:
            count = summary.counts.get(state, 0)
            lines.append(
                f'drainpipe_jobs{{queue="{_label(summary.queue)}",state="{state}"}} {count}'
            )
    lines += [
        "# HELP drainpipe_queue_oldest_ready_seconds Age of the oldest job ready to run.",
        "# TYPE drainpipe_queue_oldest_ready_seconds gauge",
    ]
    for summary in summaries:
        age = summary.oldest_ready_age_s or 0.0
        lines.append(
            f'drainpipe_queue_oldest_ready_seconds{{queue="{_label(summary.queue)}"}} {age:.3f}'
        )
    lines += [
        "# HELP drainpipe_jobs_finished_total Finished jobs still kept, by outcome"
        " (falls when retention deletes records: read it as a counter that resets).",
        "# TYPE drainpipe_jobs_finished_total counter",
    ]
    for summary in summaries:
        for outcome in ("succeeded", "dead", "cancelled"):
            count = summary.counts.get(outcome, 0)
            queue = _label(summary.queue)
            lines.append(
                f'drainpipe_jobs_finished_total{{queue="{queue}",outcome="{outcome}"}} {count}'
            )
    lines += [
        "# HELP drainpipe_queue_paused 1 while the queue is paused.",
        "# TYPE drainpipe_queue_paused gauge",
    ]
    for summary in summaries:
        lines.append(
            f'drainpipe_queue_paused{{queue="{_label(summary.queue)}"}} {int(summary.paused)}'
        )
    return "\n".join(lines) + "\n"


class Console:
    """The console's half of :class:`~drainpipe.console.management_app.ManagementApp`."""

    def __init__(self, app: ManagementApp, metrics_token: str | None) -> None:
        if metrics_token is not None and (
            not isinstance(metrics_token, str) or len(metrics_token) < 16
        ):
            raise ValueError("metrics_token must be a string of at least 16 characters")
        self.app = app
        self.metrics_token = metrics_token
        self._indexed = False

    # -- overview and metrics -------------------------------------------------------------

    async def summaries(self, queues: list[str]) -> list[QueueOverview]:
        db = self.app.db
        if not self._indexed:
            # keep the totals of queues not kept yet (counted once from
            # their records; a no-op for a queue kept already): once per app instance
            await db.fetch(ops.ENSURE_QUEUE_OVERVIEW, ops.ensure_queue_overview_params(queues))
            self._indexed = True
        rows = await db.fetch(ops.OVERVIEW, ops.overview_params(queues, self.app._clock()))
        summaries = ops.parse_overview(rows)
        # what flow limits hold in running queues with ready jobs (a paused queue holds all
        # of them): one more round trip, a primary-key probe for a queue without limits
        running = [s.queue for s in summaries if s.ready and not s.paused]
        if not running:
            return summaries
        _, held = pause_ops.parse_queue_holds(
            await db.fetch(pause_ops.QUEUE_HOLDS, pause_ops.paused_params(running))
        )
        return [replace(s, held=held[s.queue]) if s.queue in held else s for s in summaries]

    async def queues(self) -> Response:
        summaries = await self.summaries(list(self.app.jobs.queue_names))
        return self.app._body([overview_json(s) for s in summaries])

    async def inboxes(self, agents: AgentInboxes) -> Response:
        """The agent inboxes' summaries (read-only, metadata only)."""
        return self.app._body([summary.to_json() for summary in await agents.overview()])

    def metrics_allowed(self, request: Any) -> bool:
        """True when the request carries the metrics token as its bearer token."""
        if self.metrics_token is None:
            return False
        header = request.headers.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        return hmac.compare_digest(token.strip().encode(), self.metrics_token.encode())

    async def metrics(self) -> Response:
        summaries = await self.summaries(list(self.app.jobs.queue_names))
        return Response(
            200,
            prometheus_text(summaries).encode(),
            headers={
                "content-type": _TEXT_TYPE,
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
            },
        )

    # -- pause and resume -----------------------------------------------------------------

    async def pause(self, queue: str, principal: Principal, *, pause: bool) -> Response:
        app = self.app
        await app.db.fetch(
            ops.AUDITED_PAUSE,
            ops.audited_pause_params(app.target, principal.actor, queue, pause, app._clock()),
        )
        [summary] = await self.summaries([queue])
        return app._body(overview_json(summary))

    # -- search ---------------------------------------------------------------------------

    @staticmethod
    def search_filter(params: Mapping[str, Any], base: JobFilter) -> JobFilter | None:
        """``base`` (queue, state, tenant) with ``GET /jobs``'s console filters, or None when
        none of them is given (the plain list answers then)."""
        if all(params.get(key) in (None, "") for key in SEARCH_KEYS):
            return None
        since = parse_instant(params.get("since"), "since")
        until = parse_instant(params.get("until"), "until")
        _check_span(since, until)
        return JobFilter(
            queue=base.queue,
            state=base.state,
            tenant=base.tenant,
            code=parse_code(params.get("code")),
            since=since,
            until=until,
            dedupe_key=_text(params.get("dedupe_key"), "dedupe_key", 255),
            id=parse_job_id(params.get("id")),
        )

    async def search(
        self, where: JobFilter, limit: int, before: Any
    ) -> tuple[list[JobRecord], Any]:
        app = self.app
        rows = await app.db.fetch(
            ops.SEARCH, ops.search_params(where, limit + 1, before, app._clock())
        )
        records, after = ops.parse_search(rows, limit)
        return await app.jobs._held(records), after

    async def causes(self, records: list[Any]) -> dict[tuple[str, int], str]:
        """Why each dead job of ``records`` that spent its attempts died: one round trip,
        only when the page has such a job."""
        spent = [(r.queue, r.id) for r in records if r.last_code in _SPENT]
        if not spent:
            return {}
        return ops.parse_causes(await self.app.db.fetch(ops.CAUSES, ops.causes_params(spent)))

    # -- bulk actions ---------------------------------------------------------------------

    def bulk_request(self, body: bytes) -> tuple[JobFilter, int]:
        """The filter and expected count of a bulk call's body (400 on anything else)."""
        try:
            data = json.loads(body or b"null")
        except (ValueError, RecursionError):  # also JSON nested past the recursion limit
            raise invalid_request("The body must be JSON", code=BODY_INVALID) from None
        if not isinstance(data, dict) or set(data) - {"filter", "expected"}:
            raise invalid_request(
                'The body must be {"filter": {...}, "expected": n}', code=BODY_INVALID
            )
        raw = data.get("filter")
        if not isinstance(raw, dict):
            raise _bad_filter("filter must be an object")
        unknown = set(raw) - set(_BULK_FILTER_KEYS)
        if unknown:
            raise _bad_filter(
                f"filter takes {', '.join(_BULK_FILTER_KEYS)}, not {', '.join(sorted(unknown))}"
            )
        expected = data.get("expected")
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
            raise invalid_request(
                "expected must be the number of jobs the filter matches", code=BODY_INVALID
            )
        if expected > MAX_BULK:
            raise invalid_request(
                f"A bulk action takes at most {MAX_BULK:,} jobs", code=BULK_TOO_LARGE
            )
        queue = _text(raw.get("queue"), "queue", 48)
        if queue is not None and queue not in self.app.jobs.queue_names:
            raise invalid_request(f'No queue "{queue}" is declared here', code="QUEUE_UNKNOWN")
        state = _text(raw.get("state"), "state", 20)
        if state is not None and state not in STATES:
            raise invalid_request(f"state must be one of {', '.join(STATES)}", code="STATE_INVALID")
        since = parse_instant(raw.get("since"), "since")
        until = parse_instant(raw.get("until"), "until")
        _check_span(since, until)
        where = JobFilter(
            queue=queue,
            state=state,
            tenant=_text(raw.get("tenant"), "tenant", 200),
            code=parse_code(raw.get("code")),
            since=since,
            until=until,
        )
        return where, expected

    async def bulk(self, request: Any, action: str, principal: Principal) -> Any:
        app = self.app
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            raise DrainpipeError(
                "invalid_request",
                f"The body is larger than {MAX_BODY} bytes",
                code=BODY_TOO_LARGE,
                status=413,
            )

        async def act() -> Response:
            # once per Idempotency-Key: a repeat is answered from storage, unaudited
            key = request.headers.get(app.idempotency.header)
            try:
                body = await request.body()
                if len(body) > MAX_BODY:
                    raise DrainpipeError(
                        "invalid_request",
                        f"The body is larger than {MAX_BODY} bytes",
                        code=BODY_TOO_LARGE,
                        status=413,
                    )
                where, expected = self.bulk_request(body)
                return await self._bulk_once(where, expected, action, principal, key)
            except DrainpipeError as exc:
                if exc.status >= 500:
                    raise  # the key is released: a retry with it runs again
                return app._problem(exc, request_path(request))

        return await app.idempotency.handle(request, act)

    async def _bulk_once(
        self, where: JobFilter, expected: int, action: str, principal: Principal, key: str | None
    ) -> Response:
        app = self.app
        rows = await app.db.fetch(
            ops.SEARCH, ops.search_params(where, MAX_BULK + 1, None, app._clock())
        )
        matched = [(int(row[0]), str(row[1])) for row in rows]
        if len(matched) > MAX_BULK:
            raise invalid_request(
                f"The filter matches more than {MAX_BULK:,} jobs; narrow it",
                code=BULK_TOO_LARGE,
            )
        if len(matched) != expected:
            raise BulkCountChanged(len(matched), expected)
        done = refused = 0
        # each job through the single action's own path (its audit row, its rules)
        for job_id, queue in matched:
            try:
                if action == "cancel":
                    await app.job_routes.cancel_one(queue, job_id, principal)
                else:
                    await app.job_routes.replay_once(queue, job_id, principal, key)
                done += 1
            except DrainpipeError as exc:
                if exc.status >= 500:
                    raise
                refused += 1
        counts = {"matched": len(matched), "done": done, "refused": refused}
        detail = {"filter": _filter_json(where), "expected": expected, **counts}
        await app.db.fetch(
            ops.AUDIT_BULK,
            ops.audit_bulk_params(
                app.target,
                principal.actor,
                f"bulk_{action}",
                where.queue,
                key,
                detail,
                app._clock(),
            ),
        )
        return app._body(counts)


def _filter_json(where: JobFilter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _BULK_FILTER_KEYS:
        value = getattr(where, name)
        if value is not None:
            out[name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def cause_of(record: Any, causes: Mapping[tuple[str, int], str]) -> str | None:
    return causes.get((record.queue, record.id))


def records_json(records: list[Any], causes: Mapping[tuple[str, int], str]) -> list[dict[str, Any]]:
    return [record_json(r, history=False, cause=cause_of(r, causes)) for r in records]
