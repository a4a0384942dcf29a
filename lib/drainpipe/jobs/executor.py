"""``jobs.executor_app(tokens=..., budget=25.0)``: the agent inbox's pull protocol over jobs
(docs/reference.md section 11, last bullet; seed 003's private executor endpoints).

    POST /claim {"queues", "max", "wait", "lease"}  → {"jobs": [{"id", "queue", "payload",
                                                       "attempt", "lease_id", "lease_until"}]}
    POST /settle {"lease_id", "action": "complete", "code"?}   a code: succeeds as skipped
    POST /settle {"lease_id", "action": "fail", "error", "code"?, "retry_in"?}
    POST /settle {"lease_id", "action": "extend", "seconds"}

Lease ids travel in bodies only, never in a URL (access logs, a Problem's ``instance``):
the per-lease routes of earlier releases (``/jobs/{lease_id}/complete|fail|extend``)
answer 410 ``SETTLE_MOVED`` without reading the id. Each token is scoped to queues
(``{token: ["emails", ...]}`` or ``"*"``): a queue outside it → 403 ``QUEUE_FORBIDDEN``. A
lease id (``lse_…``) names the job, its queue and the claimed attempt, with 8 random bytes
of its own, and is signed (``lease_secret``, else a key derived from the tokens, so every
instance with the same tokens reads the same ids): it differs per claim and cannot be
guessed. Settling is fenced by the attempt, so a stale lease → 409 ``LEASE_LOST`` and
changes nothing; a ``complete`` repeated with the lease that completed the job → 200 again.
Claims long-poll like ``next``: short claims with 100 ms → 1 s pauses between them, never
past ``budget`` minus 1 s. Bodies are capped at the largest ``max_payload_bytes`` of the
queues plus 16 KiB (413 ``BODY_TOO_LARGE``), and a write carrying cookies must come from an
allowed ``Origin`` (403 ``CROSS_SITE_REQUEST``; docs/reference.md, "Hardening").
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

from ..agents.statements import (
    bad_parameter,
    error_text,
    long_poll_wait,
    number,
    poll_backoff,
    whole_number,
)
from ..codes import valid_code
from ..engine.core import mint_lease_id, read_lease_id
from ..errors import DrainpipeError
from ..http import Request, Response, problem_response, request_path, utf8_json_response
from ..http_guards import (
    EXECUTOR_BODY_MARGIN,
    check_origins,
    cross_site_refusal,
    read_request_body,
)
from ..models import JobContext, claimed_job

if TYPE_CHECKING:
    from .client import Jobs

RESERVE: Final = 1.0
LEASE_PREFIX: Final = "lse"
QUEUE_FORBIDDEN: Final = "QUEUE_FORBIDDEN"
SETTLE_MOVED: Final = "SETTLE_MOVED"
ACTIONS: Final = ("complete", "fail", "extend")
#: A lease id's 16-byte token: the queue's 8-byte tag, then 8 random bytes of this claim.
_TAG_BYTES: Final = 8

Scope = frozenset[str] | Literal["*"]


def executor_tokens(text: str, name: str = "EXECUTOR_TOKENS") -> dict[str, Scope]:
    """The token table of an ``EXECUTOR_TOKENS`` value, comma separated ``token=q1|q2``
    entries (``token=*``: every queue), as ``executor_app(tokens=...)`` takes it;
    ``ValueError`` naming the entry's position (never its text) when one is malformed.
    Whether the queues are declared is checked by the app."""
    table: dict[str, Scope] = {}
    for position, entry in enumerate((part.strip() for part in text.split(",")), start=1):
        if not entry:
            continue
        token, equals, listed = (part.strip() for part in entry.partition("="))
        queues = [queue.strip() for queue in listed.split("|")]
        if not equals or not all(queues):
            raise ValueError(f"{name} entry {position} must read token=queue|queue or token=*")
        if len(token) < 16:
            raise ValueError(f"{name} entry {position}: tokens are at least 16 characters")
        if token in table:
            raise ValueError(f"{name} entry {position} repeats an earlier token")
        table[token] = "*" if queues == ["*"] else frozenset(queues)
    if not table:
        raise ValueError(f"{name} lists no token")
    return table


class _Coded(Exception):
    """An executor's failure as ``Jobs.fail`` reads it: the message and a safe code."""

    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def _queue_tag(queue: str) -> bytes:
    return hashlib.sha256(b"drainpipe-queue\0" + queue.encode()).digest()[:_TAG_BYTES]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Executor:
    def __init__(
        self,
        jobs: Jobs,
        tokens: Mapping[str, Collection[str] | Literal["*"]],
        budget: float,
        lease_secret: str | bytes | None,
    ) -> None:
        if not isinstance(tokens, Mapping) or not tokens:
            raise ValueError("tokens must map at least one bearer token to its queues")
        declared = set(jobs.queue_names)
        self.table: list[tuple[bytes, Scope]] = []
        for token, queues in tokens.items():
            if not isinstance(token, str) or len(token) < 16:
                raise ValueError("executor tokens must be strings of at least 16 characters")
            if queues == "*":
                self.table.append((_digest(token), "*"))
                continue
            if isinstance(queues, str) or not all(isinstance(q, str) for q in queues):
                raise ValueError('each token maps to "*" or a collection of queue names')
            unknown = set(queues) - declared
            if unknown:
                raise ValueError(f"tokens name undeclared queues: {', '.join(sorted(unknown))}")
            self.table.append((_digest(token), frozenset(queues)))
        if not isinstance(budget, int | float) or isinstance(budget, bool) or budget <= RESERVE:
            raise ValueError(f"budget must be seconds, more than {RESERVE:g}")
        if lease_secret is None:
            # the same tokens give every instance the same key, without another setting
            material = b"".join(sorted(digest for digest, _ in self.table))
            secret = hmac.new(b"drainpipe-executor-leases", material, hashlib.sha256).digest()
        else:
            secret = lease_secret.encode() if isinstance(lease_secret, str) else lease_secret
            if len(secret) < 16:
                raise ValueError("lease_secret must be at least 16 bytes")
        self.secret = secret
        self.jobs = jobs
        self.budget = float(budget)
        self.queue_by_tag = {_queue_tag(queue): queue for queue in declared}
        # the largest payload a queue takes, plus room for the request's other fields
        limits = [jobs._payload_limit(queue) for queue in declared]
        self.max_body_bytes = max(limits, default=0) + EXECUTOR_BODY_MARGIN

    def scope(self, request: Any) -> Scope:
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        found: Scope | None = None
        if scheme.lower() == "bearer" and presented.strip():
            digest = _digest(presented.strip())
            for known, queues in self.table:
                if hmac.compare_digest(known, digest):
                    found = queues
        if found is None:
            raise DrainpipeError("unauthorized", "A bearer token is required", code="UNAUTHORIZED")
        return found

    @staticmethod
    def check_queue(scope: Scope, queue: str) -> None:
        if scope != "*" and queue not in scope:
            raise DrainpipeError(
                "forbidden", "This token may not use that queue", code=QUEUE_FORBIDDEN
            )

    # -- claim ---------------------------------------------------------------------------

    async def claim(self, scope: Scope, body: dict[str, Any]) -> list[dict[str, Any]]:
        queues = body.get("queues")
        if isinstance(queues, str):
            queues = [queues]
        if (
            not isinstance(queues, list)
            or not queues
            or not all(isinstance(q, str) for q in queues)
        ):
            raise bad_parameter("queues", "queues must list the queues to claim from")
        for queue in queues:
            if queue not in self.queue_by_tag.values():
                raise DrainpipeError("not_found", f"No queue {queue}", code="QUEUE_NOT_FOUND")
            self.check_queue(scope, queue)
        count = whole_number(body.get("max", 1), "max", 1, 10)
        wait = number(body.get("wait", 0), "wait", 0, 30)
        lease = number(body.get("lease", 300), "lease", 1, 3600)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + long_poll_wait(wait, self.budget, RESERVE)
        step = 0
        while True:
            claimed: list[Any] = []
            for queue in dict.fromkeys(queues):
                if len(claimed) >= count:
                    break
                claimed += await self.jobs.claim(queue, batch=count - len(claimed), lease=lease)
            if claimed or loop.time() >= deadline:
                return [self.describe(job) for job in claimed]
            step += 1
            await asyncio.sleep(min(poll_backoff(step), max(0.0, deadline - loop.time())))

    def describe(self, job: Any) -> dict[str, Any]:
        # the random half makes each claim's lease id its own, even for the same attempt
        token = _queue_tag(job.queue) + os.urandom(16 - _TAG_BYTES)
        lease_id = mint_lease_id(self.secret, LEASE_PREFIX, job.id, job.attempts, token)
        until = job.visible_until
        return {
            "id": job.id,
            "queue": job.queue,
            "payload": job.payload,
            "attempt": job.attempts,
            "lease_id": lease_id,
            "lease_until": None if until is None else until.isoformat(),
        }

    # -- settlements ---------------------------------------------------------------------

    def held_job(self, scope: Scope, lease_id: str) -> Any:
        """The job a lease id names, as the fenced settlements need it (queue, id, attempt);
        a lease id that is not ours is a lost lease."""
        decoded = read_lease_id(self.secret, LEASE_PREFIX, lease_id)
        queue = None if decoded is None else self.queue_by_tag.get(decoded[2][:_TAG_BYTES])
        if decoded is None or queue is None:
            raise DrainpipeError("conflict", "That lease is not current", code="LEASE_LOST")
        self.check_queue(scope, queue)
        now = datetime.now(UTC)
        return claimed_job(
            decoded[0], queue, None, JobContext(), decoded[1], decoded[1], now, now, None
        )

    async def completed_by(self, job: Any) -> bool:
        """Whether the job succeeded on the attempt this lease held: a repeated ``complete``
        (its answer was lost) then answers 200 again, as an agent's repeated ack does."""
        try:
            record = await self.jobs.get(job.queue, job.id)
        except DrainpipeError:
            return False  # a backend without records: the repeat stays a lost lease
        return (
            record is not None and record.state == "succeeded" and record.attempts == job.attempts
        )

    async def settle_body(self, scope: Scope, body: dict[str, Any]) -> Any:
        """``POST /settle``: the action and the lease id come in the body."""
        action = body.get("action")
        if action not in ACTIONS:
            raise bad_parameter("action", "action must be one of complete, fail, extend")
        lease_id = body.get("lease_id")
        if not isinstance(lease_id, str) or not lease_id:
            raise bad_parameter("lease_id", "lease_id must be the lease id of the claim")
        return await self.settle(scope, str(action), lease_id, body)

    async def settle(self, scope: Scope, op: str, lease_id: str, body: dict[str, Any]) -> Any:
        job = self.held_job(scope, lease_id)
        lost = DrainpipeError("conflict", "That lease is no longer current", code="LEASE_LOST")
        answer: dict[str, Any] = {"id": job.id, "queue": job.queue}
        if op == "complete":
            code = body.get("code")
            if code is not None and not valid_code(code):
                raise bad_parameter("code", "code must match ^[A-Z][A-Z0-9_]{0,63}$")
            driver = self.jobs.driver
            if code is not None:
                if "skip" in driver.lacks:
                    raise DrainpipeError(
                        "invalid_request",
                        "This backend records no codes",
                        code="CODE_NOT_SUPPORTED",
                    )
                ok = bool(await driver.skip(job, code))
            else:
                ok = await self.jobs.complete(job)
            if not ok and not await self.completed_by(job):
                raise lost
            return {**answer, "state": "succeeded"}
        if op == "fail":
            code = body.get("code")
            if code is not None and not valid_code(code):
                raise bad_parameter("code", "code must match ^[A-Z][A-Z0-9_]{0,63}$")
            message = error_text(body.get("error")) or "failed"
            retry_in = body.get("retry_in")
            wait = None if retry_in is None else number(retry_in, "retry_in", 0, 7 * 86400)
            outcome = await self.jobs.fail(job, _Coded(message, code), retry_in=wait)
            if outcome is None:
                raise lost
            return {**answer, "state": outcome}
        seconds = number(body.get("seconds"), "seconds", 1, 3600)
        if not await self.jobs.extend(job, seconds):
            raise lost
        until = datetime.now(UTC) + timedelta(seconds=seconds)
        return {**answer, "state": "running", "lease_until": until.isoformat()}


async def _body(request: Request, max_bytes: int) -> dict[str, Any]:
    raw = await read_request_body(request, max_bytes)
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # also JSON nested past Python's recursion limit
        raise DrainpipeError(
            "invalid_request", "The body is not JSON", code="INVALID_BODY"
        ) from None
    if not isinstance(body, dict):
        raise DrainpipeError(
            "invalid_request", "The body must be a JSON object", code="INVALID_BODY"
        )
    return body


def build_executor_app(
    jobs: Jobs,
    *,
    tokens: Mapping[str, Collection[str] | Literal["*"]],
    budget: float = 25.0,
    lease_secret: str | bytes | None = None,
    allowed_origins: Collection[str] | None = None,
) -> Any:
    from ..http_routes import Route, Router

    executor = Executor(jobs, tokens, budget, lease_secret)
    origins = check_origins(allowed_origins)

    async def answer(request: Request, work: Any) -> Response:
        try:
            refusal = cross_site_refusal(request.method, request.headers, origins)
            if refusal is not None:
                raise refusal
            scope = executor.scope(request)
            body = await _body(request, executor.max_body_bytes)
            return utf8_json_response(await work(scope, body))
        except DrainpipeError as error:
            return problem_response(error, request_path(request))

    async def claim(request: Request) -> Response:
        async def work(scope: Scope, body: dict[str, Any]) -> Any:
            return {"jobs": await executor.claim(scope, body)}

        return await answer(request, work)

    async def settle(request: Request) -> Response:
        return await answer(request, executor.settle_body)

    async def moved(request: Request) -> Response:
        # the old per-lease routes: answered without reading the id, and without echoing
        # the path (it holds the lease id) as the Problem's instance
        error = DrainpipeError(
            "not_found",
            "Lease ids travel in the body now: POST /settle {lease_id, action, ...}",
            code=SETTLE_MOVED,
            status=410,
        )
        return problem_response(error)

    return Router(
        [
            Route("/claim", claim, methods=["POST"]),
            Route("/settle", settle, methods=["POST"]),
            Route("/jobs/{lease_id}/{action}", moved, methods=["POST", "GET"]),
        ]
    )
