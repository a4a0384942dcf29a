"""Durable steps: ``job.step``, ``job.sleep`` and ``job.wait_for`` under work/drain/route.

Replay, not snapshots: a resumed handler runs from the top; each step, sleep and wait is
known by its order and name, and a recorded one hands back its stored value instead of
running again. One :class:`StepRuntime` serves every job of a run; a job's own replay state
(the steps loaded from storage once per run, the next number) lives on the claimed job.

Every write is one round trip fenced by the attempt, so a holder whose attempt
ended never records a step; a suspension releases the lease in the same call and the run
ends with :class:`~drainpipe.codes.Suspend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import TYPE_CHECKING, Any

from ..codes import Suspend
from ..models import ChildOutcome, Job
from ..telemetry import active_telemetry
from .sealing import open_event
from .steprules import (
    LEASE_END,
    MAX_NAME,
    STATE,
    RunState,
    StepRules,
    check_event,
    check_name,
    expect,
    first_run,
    lost,
    refused,
    step_names,
    waited,
)

if TYPE_CHECKING:
    from .client import Jobs

__all__ = ["LEASE_END", "MAX_NAME", "StepRuntime", "check_event", "step_names"]


class StepRuntime(StepRules):
    """What the steps of one queue's jobs need during a run: the rules of
    :class:`~drainpipe.jobs.steprules.StepRules` (limits, keyring, clock, the budget rule
    with its deadline as an ``asyncio`` loop time) and the round trips, awaited."""

    def __init__(self, jobs: Jobs, queue: str, *, step_margin: float = 5.0) -> None:
        super().__init__(jobs, queue, step_margin=step_margin)
        # the round trips go to the complete driver (the sync twin keeps its SQL backend)
        self.backend = jobs.driver

    # -- per job --------------------------------------------------------------------------

    async def _state(self, job: Job[Any]) -> RunState:
        state: RunState | None = job.__dict__.get(STATE)
        if state is None:
            recorded = {} if first_run(job) else await self.backend.load_steps(job.queue, job.id)
            state = RunState(recorded)
            job.__dict__[STATE] = state
        return state

    def _budget_low(self, job: Job[Any]) -> str | None:
        return self.budget_reason(job, asyncio.get_running_loop().time())

    async def _yield_turn(self, job: Job[Any], reason: str) -> None:
        """Budget rule: suspend with immediate eligibility (state ``queued``). A spent
        budget also ends the run's claims; a lease running out only this job's run (the
        run, or any other, claims it again at once with a fresh lease)."""
        answer = await self.backend.suspend(job, 0.0, None)
        if answer == "lost":
            raise lost(job)
        raise Suspend(None, budget=reason == "budget")

    # -- the calls ------------------------------------------------------------------------

    async def step(
        self, job: Job[Any], name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = check_name(name, "name")
        self._check_fn(fn)
        state = await self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        if recorded is not None and recorded[1] == "done":
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
        state: RunState,
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
        if answer == "exists":  # recorded meanwhile by this very attempt: keep the stored one
            state.recorded = await self.backend.load_steps(job.queue, job.id)
            return self._open(state.recorded[number][2])
        refused(job, number, name, answer)
        state.recorded[number] = (name, "done", stored)
        return plain

    async def sleep(self, job: Job[Any], when: Any) -> None:
        delay = self._delay(when)
        state = await self._state(job)
        number, recorded = state.take()
        if expect(job, number, "sleep", recorded) is not None:
            return  # slept already: the claim resumed it at (or after) its wake time
        answer = await self.backend.suspend(job, delay, "time", number, "sleep", self._now())
        refused(job, number, "sleep", answer)
        raise Suspend("time")

    async def wait_for(self, job: Job[Any], event: str, key: Any, timeout: Any) -> Any:  # noqa: ASYNC109 - the contract's name: a stored deadline, not a wait here
        name, wait = self._wait_args(event, key, timeout)
        state = await self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        if recorded is not None and recorded[1] == "done":
            return open_event(self._jobs.keyring, event, waited(recorded))
        outcome, data = await self.backend.wait_event(
            job, event, key, wait, number, name, self._now()
        )
        if outcome in ("taken", "timeout"):
            state.recorded[number] = (name, "done", {"data": data})
            # recorded as stored (sealed when emitted with a keyring); opened for the handler
            return open_event(self._jobs.keyring, event, data)
        if outcome == "suspended":
            raise Suspend(f"event:{event}")
        refused(job, number, name, outcome)
        raise lost(job)

    # -- children -------------------------------------------------------------------------

    async def spawn_many(
        self, job: Job[Any], queue: str, payloads: Any, options: dict[str, Any]
    ) -> list[int]:
        stored, wait, max_attempts = self._spawn_args(queue, payloads, options)
        name = step_names("spawn", queue)
        state = await self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        if recorded is not None and recorded[1] == "done":
            state.spawned.add(queue)
            return [int(i) for i in recorded[2]["ids"]]
        if (low := self._budget_low(job)) is not None:
            await self._yield_turn(job, low)
        outcome, ids = await self.backend.spawn(
            job, number, name, queue, stored, wait, max_attempts, self._now()
        )
        refused(job, number, name, outcome)
        state.recorded[number] = (name, "done", {"queue": queue, "ids": ids})
        state.spawned.add(queue)
        return [int(i) for i in ids]

    async def join(self, job: Job[Any], ids: Any, queue: str | None) -> list[ChildOutcome]:
        state = await self._state(job)
        queue = self._join_queue(state, queue)
        children = [int(i) for i in ids]
        number, recorded = state.take()
        recorded = expect(job, number, "join", recorded)
        if recorded is None or recorded[1] != "done":
            outcome = await self.backend.join(job, queue, children, number, "join", self._now())
            if outcome == "suspended":
                raise Suspend("children")
            refused(job, number, "join", outcome)
            state.recorded[number] = ("join", "done", {"queue": queue, "ids": children})
        return self._outcomes(queue, await self.backend.child_outcomes(queue, children))

    # -- the handler's return value ---------------------------------------------------------

    async def keep_result(self, job: Job[Any], value: Any) -> None:
        """Keep a handler's return value as the job's result (``jobs.result``). A value that
        is not JSON is not kept; one over ``max_payload_bytes`` fails the attempt."""
        stored = self._result_to_keep(value)
        if stored is None:
            return
        from ..backends.step_statements import RESULT_NAME, RESULT_NUMBER

        answer = await self.backend.record_step(
            job, RESULT_NUMBER, RESULT_NAME, "done", stored, None, None
        )
        if answer == "lost":
            raise lost(job)
