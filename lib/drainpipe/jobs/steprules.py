"""What durable steps decide without I/O, shared by both twins' step runtimes.

:class:`StepRules` holds everything a run of ``job.step``, ``sleep``, ``wait_for``,
``spawn`` and ``join`` computes: names and their checks, the replay decision (what the
n-th call finds recorded), the stored form of a result (JSON, size-checked, sealed on an
encrypted queue), delays, spawn arguments, the budget rule, and the errors a database
answer means. The async :class:`~drainpipe.jobs.steps.StepRuntime` and the sync twin's
:class:`~drainpipe.sync.steps.SyncStepRuntime` add only the round trips, so the same call
answers the same value or the same error in both. No asyncio, no telemetry here: the sync
twin imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from ..codes import STEP_MISMATCH, Discard
from ..db import dump_json
from ..errors import DrainpipeError, validation_error
from ..models import ChildOutcome, Job
from ..validation import aware, seconds
from .guard import DEFAULT_MAX_ATTEMPTS
from .sealing import SEALED_KEY, is_sealed

if TYPE_CHECKING:
    from ..keyring import Keyring

__all__ = [
    "LEASE_END",
    "MAX_NAME",
    "RunState",
    "StepRules",
    "budget_low",
    "check_event",
    "check_name",
    "first_run",
    "lost",
    "mismatch",
    "step_names",
]

#: step names, event names and keys: at most this many characters (the SQL checks it too)
MAX_NAME = 200
#: where a claimed job keeps its run's replay state (its instance dict)
STATE = "_step_state"
#: a claimed job's lease end as the budget rule counts it (set by the worker at the claim
#: and at every heartbeat that extended it), on the Jobs' clock
LEASE_END = "_lease_end"
#: the spawn options a child takes (the rest of enqueue's are the parent's business)
SPAWN_OPTIONS = frozenset({"delay", "run_at", "max_attempts", "context"})


class RunState:
    """One run's replay state: the recorded steps, the number the next one gets, and the
    queues this run's spawns went to (``join``'s default)."""

    __slots__ = ("next", "recorded", "spawned")

    def __init__(self, recorded: dict[int, tuple[str, str, Any]]) -> None:
        self.recorded = recorded
        self.next = 1
        self.spawned: set[str] = set()

    def take(self) -> tuple[int, tuple[str, str, Any] | None]:
        number = self.next
        self.next += 1
        return number, self.recorded.get(number)


def check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise validation_error(
            f"{what} must be a text of 1 to {MAX_NAME} characters",
            [{"message": "Expected a short text", "path": [what]}],
        )
    return value


def check_event(event: Any, key: Any) -> None:
    """An event name (1..200 characters) and key (0..200): ``validation`` otherwise."""
    check_name(event, "event")
    if not isinstance(key, str) or len(key) > MAX_NAME:
        raise validation_error(
            f"key must be a text of at most {MAX_NAME} characters",
            [{"message": "Expected a short text", "path": ["key"]}],
        )


def lost(job: Job[Any]) -> DrainpipeError:
    return DrainpipeError(
        "conflict",
        f"queue {job.queue} job {job.id}: the attempt no longer holds the job; the step was"
        " not recorded",
        code="LEASE_LOST",
    )


def mismatch(job: Job[Any], number: int, name: str, recorded: str) -> Discard:
    return Discard(
        STEP_MISMATCH,
        f"Step {number} of queue {job.queue} job {job.id} is {name!r} in this run but"
        f" {recorded!r} was recorded: the handler changed shape",
    )


def step_names(kind: str, name: str) -> str:
    """The recorded name of a sleep, a wait or a spawn (``sleep``, ``wait:<event>``)."""
    return kind if not name else f"{kind}:{name}"


def budget_low(deadline: float | None, now: float, margin: float) -> bool:
    """The budget rule: True when less than ``margin`` seconds are left before
    ``deadline`` (both on one clock); never without a deadline."""
    return deadline is not None and deadline - now < margin


def first_run(job: Job[Any]) -> bool:
    """True on a job's first run: the attempt counter is the fence and every claim moves it
    on (resumptions too), so at 1 nothing can be recorded yet and the round trip that would
    load the job's steps is saved (a 10-step job costs its 10 records and nothing more)."""
    return job.attempts <= 1


def expect(
    job: Job[Any], number: int, name: str, recorded: tuple[str, str, Any] | None
) -> tuple[str, str, Any] | None:
    """The record found under this call's number, checked against its name: a record of
    another name ends the job (``STEP_MISMATCH``)."""
    if recorded is not None and recorded[0] != name:
        raise mismatch(job, number, name, recorded[0])
    return recorded


def refused(job: Job[Any], number: int, name: str, answer: str) -> None:
    """Raise what a write's answer means when it was not written: ``lost`` (the attempt's
    fence moved) or ``mismatch`` (another step holds the number)."""
    if answer == "lost":
        raise lost(job)
    if answer == "mismatch":
        raise mismatch(job, number, name, "another step")


def waited(recorded: tuple[str, str, Any]) -> Any:
    """The data a recorded wait took (None after its timeout)."""
    stored = recorded[2]
    return stored.get("data") if isinstance(stored, dict) else None


class StepRules:
    """One queue's step rules for a run: its limits and keyring, the clock, the margin of
    the budget rule and the run's deadline (on the runner's clock; None: no budget)."""

    def __init__(self, jobs: Any, queue: str, *, step_margin: float = 5.0) -> None:
        self.backend: Any = jobs.backend
        self.queue = queue
        self._jobs = jobs
        self._now: Callable[[], datetime] = jobs._now
        # a jobs object without policy(): then neither a limit nor a keyring
        policy_of = getattr(jobs, "policy", None)
        policy = None if policy_of is None else policy_of(queue)
        self._max_bytes = None if policy is None else policy.max_payload_bytes
        self._policy = policy
        self._keyring: Keyring | None = (
            getattr(jobs, "keyring", None) if policy is not None and policy.encrypt else None
        )
        self.step_margin = step_margin
        #: the run's budget end, set by the runner; None: no budget
        self.deadline: float | None = None

    def lease_end(self, lease: float) -> datetime:
        """When a lease of ``lease`` seconds taken now ends, on the clock the budget rule
        reads (the Jobs' ``now``, so a test can move it)."""
        return self._now() + timedelta(seconds=lease)

    def budget_reason(self, job: Job[Any], now: float) -> str | None:
        """The budget rule: ``"budget"`` when less than the margin is left of the call's
        budget (``now`` on the runner's clock), ``"lease"`` when less is left of the job's
        lease (as the claim or the last heartbeat that extended it left it), else None."""
        if budget_low(self.deadline, now, self.step_margin):
            return "budget"
        end: datetime | None = job.__dict__.get(LEASE_END)
        if end is not None and (end - self._now()).total_seconds() < self.step_margin:
            return "lease"
        return None

    # -- values -----------------------------------------------------------------------------

    def _store(self, value: Any) -> tuple[Any, Any]:
        """(what is stored, what the handler gets): the JSON form, sealed when the queue
        is encrypted; over ``max_payload_bytes`` → ``PAYLOAD_TOO_LARGE``."""
        if hasattr(value, "model_dump") and callable(value.model_dump):
            value = value.model_dump(mode="json")
        data = dump_json(value, "step result", max_bytes=self._max_bytes)
        plain = orjson.loads(data)
        if self._keyring is None:
            return plain, plain
        return {"$dp": 1, SEALED_KEY: self._keyring.seal(self.queue, data)}, plain

    def _open(self, stored: Any) -> Any:
        if self._keyring is not None and is_sealed(stored):
            return orjson.loads(self._keyring.open(self.queue, stored[SEALED_KEY]))
        return stored

    def open_result(self, stored: Any) -> Any:
        return self._open(stored)

    def _result_to_keep(self, value: Any) -> Any | None:
        """The stored form of a handler's return value, or None when it is not kept (not
        JSON); one over ``max_payload_bytes`` fails the attempt."""
        try:
            stored, _ = self._store(value)
        except DrainpipeError as exc:
            if exc.code == "PAYLOAD_TOO_LARGE":
                raise
            return None
        return stored

    # -- arguments --------------------------------------------------------------------------

    @staticmethod
    def _check_fn(fn: Any) -> None:
        if not callable(fn):
            raise TypeError("job.step(name, fn, ...): fn must be callable")

    def _delay(self, when: Any) -> float:
        if isinstance(when, datetime):
            delay = (aware(when, "until") - self._now()).total_seconds()
        else:
            delay = (
                seconds(when, "delay", minimum=-float("inf"))
                if not isinstance(when, timedelta)
                else when.total_seconds()
            )
        delay = max(0.0, delay)
        if self._policy is not None:
            self._policy.check_delay(delay)
        return delay

    def _wait_args(self, event: Any, key: Any, timeout: Any) -> tuple[str, float | None]:
        """(the wait's recorded name, its timeout in seconds or None)."""
        check_event(event, key)
        wait = None if timeout is None else seconds(timeout, "timeout")
        if wait is not None and self._policy is not None:
            self._policy.check_delay(wait)
        return step_names("wait", event), wait

    def _spawn_args(
        self, queue: str, payloads: Any, options: dict[str, Any]
    ) -> tuple[list[Any], float, int]:
        """(the children's stored payloads, their delay, their max_attempts), each checked
        as ``enqueue_many`` checks them."""
        jobs = self._jobs
        jobs._check_queue(queue)
        unknown = set(options) - SPAWN_OPTIONS
        if unknown:
            raise TypeError(
                f"spawn takes delay, run_at, max_attempts and context, not {sorted(unknown)}"
            )
        if isinstance(payloads, str | bytes) or not hasattr(payloads, "__iter__"):
            raise TypeError("spawn_many(queue, payloads): payloads must be a list")
        limit = getattr(jobs, "_max_attempts", None)
        asked = options.get("max_attempts")
        if limit is not None:
            max_attempts: int = limit(queue, asked)
        else:
            max_attempts = DEFAULT_MAX_ATTEMPTS if asked is None else asked
        backend_name = getattr(self.backend, "name", "")
        stored: list[Any] = []
        wait = 0.0
        for payload in payloads:
            value, wait = jobs._enqueue_args(
                queue,
                payload,
                options.get("delay"),
                options.get("run_at"),
                max_attempts,
                None,
                "always",
                options.get("context"),
                backend_name,
            )
            stored.append(value)
        return stored, wait, max_attempts

    def _join_queue(self, state: RunState, queue: str | None) -> str:
        if queue is None:
            if len(state.spawned) != 1:
                raise DrainpipeError(
                    "invalid_request",
                    "join(ids) needs queue= unless this run spawned into exactly one queue",
                )
            queue = next(iter(state.spawned))
        self._jobs._check_queue(queue)
        return queue

    def _outcomes(
        self, queue: str, rows: list[tuple[int, str, str | None, bool, Any]]
    ) -> list[ChildOutcome]:
        """``join``'s answer: each child's outcome, its kept result opened with the
        child queue's keyring."""
        child = StepRules(self._jobs, queue)
        return [
            ChildOutcome(
                id=child_id,
                queue=queue,
                state=child_state,
                last_code=code,
                result=child.open_result(result) if kept else None,
            )
            for child_id, child_state, code, kept, result in rows
        ]
