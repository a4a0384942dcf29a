"""Durable steps: ``job.step``, ``job.sleep`` and ``job.wait_for`` under work/drain/route.

Replay, not snapshots: a resumed handler runs from the top; each step, sleep and wait is
known by its order and name, and a recorded one hands back its stored value instead of
running again. One :class:`StepRuntime` serves every job of a run; a job's own replay state
(the steps loaded from storage once per run, the next number) lives on the claimed job.

Every write is one round trip fenced by the attempt (jobs 0016), so a holder whose attempt
ended never records a step; a suspension releases the lease in the same call and the run
ends with :class:`~drainpipe.codes.Suspend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from ..codes import STEP_MISMATCH, Discard, Suspend
from ..db import dump_json
from ..errors import DrainpipeError, validation_error
from ..models import Job
from ..telemetry import active_telemetry
from ..validation import aware, seconds
from .sealing import SEALED_KEY, is_sealed, open_event

if TYPE_CHECKING:
    from ..keyring import Keyring
    from .client import Jobs

__all__ = ["LEASE_END", "MAX_NAME", "StepRuntime", "check_event", "step_names"]

#: step names, event names and keys: at most this many characters (the SQL checks it too)
MAX_NAME = 200
_STATE = "_step_state"
#: a claimed job's lease end as the budget rule counts it (set by the worker at the claim
#: and at every heartbeat that extended it), on the Jobs' clock
LEASE_END = "_lease_end"


class _RunState:
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


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise validation_error(
            f"{what} must be a text of 1 to {MAX_NAME} characters",
            [{"message": "Expected a short text", "path": [what]}],
        )
    return value


def check_event(event: Any, key: Any) -> None:
    """An event name (1..200 characters) and key (0..200): ``validation`` otherwise."""
    _name(event, "event")
    if not isinstance(key, str) or len(key) > MAX_NAME:
        raise validation_error(
            f"key must be a text of at most {MAX_NAME} characters",
            [{"message": "Expected a short text", "path": ["key"]}],
        )


def _lost(job: Job[Any]) -> DrainpipeError:
    return DrainpipeError(
        "conflict",
        f"queue {job.queue} job {job.id}: the attempt no longer holds the job; the step was"
        " not recorded",
        code="LEASE_LOST",
    )


def _mismatch(job: Job[Any], number: int, name: str, recorded: str) -> Discard:
    return Discard(
        STEP_MISMATCH,
        f"Step {number} of queue {job.queue} job {job.id} is {name!r} in this run but"
        f" {recorded!r} was recorded: the handler changed shape",
    )


def step_names(kind: str, name: str) -> str:
    """The recorded name of a sleep or a wait (``sleep``, ``wait:<event>``)."""
    return kind if not name else f"{kind}:{name}"


class StepRuntime:
    """What the steps of one queue's jobs need during a run: the backend, the queue's
    limits and keyring, the clock, and the run's deadline for the budget rule."""

    def __init__(
        self,
        jobs: Jobs,
        queue: str,
        *,
        step_margin: float = 5.0,
    ) -> None:
        self.backend: Any = jobs.backend
        self.queue = queue
        self._jobs = jobs
        self._now = jobs._now
        policy = jobs.policy(queue)
        self._max_bytes = None if policy is None else policy.max_payload_bytes
        self._policy = policy
        self._keyring: Keyring | None = (
            jobs.keyring if policy is not None and policy.encrypt else None
        )
        self.step_margin = step_margin
        #: the run's budget end (an ``asyncio`` loop time), set by the worker; None: none
        self.deadline: float | None = None

    # -- per job --------------------------------------------------------------------------

    async def _state(self, job: Job[Any]) -> _RunState:
        state: _RunState | None = job.__dict__.get(_STATE)
        if state is None:
            # the attempt counter is the fence, and every claim moves it on (resumptions
            # too): at 1 this is the job's first run, so nothing can be recorded yet and
            # the round trip that would load its steps is saved (a 10-step job then costs
            # its 10 records and nothing more; a job's steps go with its record: jobs 0019)
            recorded = {} if job.attempts <= 1 else await self.backend.load_steps(job.queue, job.id)
            state = _RunState(recorded)
            job.__dict__[_STATE] = state
        return state

    def lease_end(self, lease: float) -> datetime:
        """When a lease of ``lease`` seconds taken now ends, on the clock the budget rule
        reads (the Jobs' ``now``, so a test can move it)."""
        return self._now() + timedelta(seconds=lease)

    def _budget_low(self, job: Job[Any]) -> str | None:
        """The budget rule: ``"budget"`` when less than the margin is left of the call's
        budget, ``"lease"`` when less is left of the job's lease (as the claim or the last
        heartbeat that extended it left it), else None."""
        deadline = self.deadline
        if deadline is not None and deadline - asyncio.get_running_loop().time() < self.step_margin:
            return "budget"
        end: datetime | None = job.__dict__.get(LEASE_END)
        if end is not None and (end - self._now()).total_seconds() < self.step_margin:
            return "lease"
        return None

    async def _yield_turn(self, job: Job[Any], reason: str) -> None:
        """Budget rule: suspend with immediate eligibility (state ``queued``). A spent
        budget also ends the run's claims; a lease running out only this job's run (the
        run, or any other, claims it again at once with a fresh lease)."""
        answer = await self.backend.suspend(job, 0.0, None)
        if answer == "lost":
            raise _lost(job)
        raise Suspend(None, budget=reason == "budget")

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

    # -- the calls ------------------------------------------------------------------------

    async def step(
        self, job: Job[Any], name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = _name(name, "name")
        if not callable(fn):
            raise TypeError("job.step(name, fn, ...): fn must be callable")
        state = await self._state(job)
        number, recorded = state.take()
        if recorded is not None:
            if recorded[0] != name:
                raise _mismatch(job, number, name, recorded[0])
            if recorded[1] == "done":
                return self._open(recorded[2])
        if (low := self._budget_low(job)) is not None:
            await self._yield_turn(job, low)
        otel = active_telemetry()
        if otel is None:
            return await self._run_step(job, state, number, name, fn, args, kwargs)
        # one span per step that runs (a replayed step runs nothing: no span); the run's
        # span is its parent, and every run of a job is in the trace its enqueue started
        attributes = {
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "drainpipe.step.number": number,
            "drainpipe.step.name": name,
        }
        with otel.span("drainpipe.step", attributes):
            return await self._run_step(job, state, number, name, fn, args, kwargs)

    async def _run_step(
        self,
        job: Job[Any],
        state: _RunState,
        number: int,
        name: str,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        started = self._now()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            code = getattr(exc, "code", None)
            # the failed step shows in the record; the attempt fails as usual, and the
            # handler's error is the one reported even when this record cannot be written
            with contextlib.suppress(Exception):
                await self.backend.record_step(
                    job,
                    number,
                    name,
                    "failed",
                    None,
                    code if isinstance(code, str) else None,
                    started,
                )
            raise
        stored, plain = self._store(value)
        answer = await self.backend.record_step(job, number, name, "done", stored, None, started)
        if answer == "lost":
            raise _lost(job)
        if answer == "mismatch":
            raise _mismatch(job, number, name, "another step")
        if answer == "exists":  # recorded meanwhile by this very attempt: keep the stored one
            state.recorded = await self.backend.load_steps(job.queue, job.id)
            return self._open(state.recorded[number][2])
        state.recorded[number] = (name, "done", stored)
        return plain

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

    async def sleep(self, job: Job[Any], when: Any) -> None:
        delay = self._delay(when)
        state = await self._state(job)
        number, recorded = state.take()
        if recorded is not None:
            if recorded[0] != "sleep":
                raise _mismatch(job, number, "sleep", recorded[0])
            return  # slept already: the claim resumed it at (or after) its wake time
        answer = await self.backend.suspend(job, delay, "time", number, "sleep", self._now())
        if answer == "lost":
            raise _lost(job)
        if answer == "mismatch":
            raise _mismatch(job, number, "sleep", "another step")
        raise Suspend("time")

    async def wait_for(self, job: Job[Any], event: str, key: Any, timeout: Any) -> Any:  # noqa: ASYNC109 - the contract's name: a stored deadline, not a wait here
        check_event(event, key)
        wait = None if timeout is None else seconds(timeout, "timeout")
        if wait is not None and self._policy is not None:
            self._policy.check_delay(wait)
        name = step_names("wait", event)
        state = await self._state(job)
        number, recorded = state.take()
        if recorded is not None:
            if recorded[0] != name:
                raise _mismatch(job, number, name, recorded[0])
            if recorded[1] == "done":
                stored = recorded[2]
                data = stored.get("data") if isinstance(stored, dict) else None
                return open_event(self._jobs.keyring, event, data)
        outcome, data = await self.backend.wait_event(
            job, event, key, wait, number, name, self._now()
        )
        if outcome in ("taken", "timeout"):
            state.recorded[number] = (name, "done", {"data": data})
            # recorded as stored (sealed when emitted with a keyring); opened for the handler
            return open_event(self._jobs.keyring, event, data)
        if outcome == "suspended":
            raise Suspend(f"event:{event}")
        if outcome == "mismatch":
            raise _mismatch(job, number, name, "another step")
        raise _lost(job)

    # -- children -------------------------------------------------------------------------

    async def spawn_many(
        self, job: Job[Any], queue: str, payloads: Any, options: dict[str, Any]
    ) -> list[int]:
        jobs = self._jobs
        jobs._check_queue(queue)
        unknown = set(options) - {"delay", "run_at", "max_attempts", "context"}
        if unknown:
            raise TypeError(
                f"spawn takes delay, run_at, max_attempts and context, not {sorted(unknown)}"
            )
        if isinstance(payloads, str | bytes) or not hasattr(payloads, "__iter__"):
            raise TypeError("spawn_many(queue, payloads): payloads must be a list")
        max_attempts = jobs._max_attempts(queue, options.get("max_attempts"))
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
        name = step_names("spawn", queue)
        state = await self._state(job)
        number, recorded = state.take()
        if recorded is not None:
            if recorded[0] != name:
                raise _mismatch(job, number, name, recorded[0])
            if recorded[1] == "done":
                state.spawned.add(queue)
                recorded_ids: list[int] = [int(i) for i in recorded[2]["ids"]]
                return recorded_ids
        if (low := self._budget_low(job)) is not None:
            await self._yield_turn(job, low)
        outcome, ids = await self.backend.spawn(
            job, number, name, queue, stored, wait, max_attempts, self._now()
        )
        if outcome == "lost":
            raise _lost(job)
        if outcome == "mismatch":
            raise _mismatch(job, number, name, "another step")
        state.recorded[number] = (name, "done", {"queue": queue, "ids": ids})
        state.spawned.add(queue)
        return [int(i) for i in ids]

    async def join(self, job: Job[Any], ids: Any, queue: str | None) -> list[Any]:
        from ..models import ChildOutcome

        state = await self._state(job)
        if queue is None:
            if len(state.spawned) != 1:
                raise DrainpipeError(
                    "invalid_request",
                    "join(ids) needs queue= unless this run spawned into exactly one queue",
                )
            queue = next(iter(state.spawned))
        self._jobs._check_queue(queue)
        children = [int(i) for i in ids]
        number, recorded = state.take()
        if recorded is not None and recorded[0] != "join":
            raise _mismatch(job, number, "join", recorded[0])
        if recorded is None or recorded[1] != "done":
            outcome = await self.backend.join(job, queue, children, number, "join", self._now())
            if outcome == "suspended":
                raise Suspend("children")
            if outcome == "lost":
                raise _lost(job)
            if outcome == "mismatch":
                raise _mismatch(job, number, "join", "another step")
            state.recorded[number] = ("join", "done", {"queue": queue, "ids": children})
        rows = await self.backend.child_outcomes(queue, children)
        child_runtime = StepRuntime(self._jobs, queue)
        return [
            ChildOutcome(
                id=child,
                queue=queue,
                state=child_state,
                last_code=code,
                result=child_runtime.open_result(result) if kept else None,
            )
            for child, child_state, code, kept, result in rows
        ]

    # -- the handler's return value ---------------------------------------------------------

    async def keep_result(self, job: Job[Any], value: Any) -> None:
        """Keep a handler's return value as the job's result (``jobs.result``). A value that
        is not JSON is not kept; one over ``max_payload_bytes`` fails the attempt."""
        try:
            stored, _ = self._store(value)
        except DrainpipeError as exc:
            if exc.code == "PAYLOAD_TOO_LARGE":
                raise
            return
        from ..ops.steps import RESULT_NAME, RESULT_NUMBER

        answer = await self.backend.record_step(
            job, RESULT_NUMBER, RESULT_NAME, "done", stored, None, None
        )
        if answer == "lost":
            raise _lost(job)

    def open_result(self, stored: Any) -> Any:
        return self._open(stored)
