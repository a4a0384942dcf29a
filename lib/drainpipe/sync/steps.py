"""Durable steps in sync handlers: ``job.step``, ``sleep``, ``wait_for``, ``spawn``,
``spawn_many`` and ``join`` without ``await`` (docs/steps.md).

The rules (names, replay, the stored form of a result, delays, spawn arguments, the budget
rule, what each database answer means) are :class:`~drainpipe.jobs.steprules.StepRules`,
shared with the async :class:`~drainpipe.jobs.steps.StepRuntime`; this module adds only
the round trips, on the sync backend. Every write is fenced by the attempt in the same
statement, so a stale holder never records a step; a suspension releases the lease in the
same call and the run ends with :class:`~drainpipe.codes.Suspend`, which the sync worker
catches. No span is emitted: the sync twin has no telemetry (docs/sync.md).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from ..codes import Suspend
from ..jobs.sealing import open_event
from ..jobs.steprules import (
    STATE,
    RunState,
    StepRules,
    check_name,
    expect,
    first_run,
    lost,
    refused,
    step_names,
    waited,
)
from ..models import ChildOutcome, Job, _workflow

if TYPE_CHECKING:
    from .jobs import Jobs

__all__ = ["SyncJob", "SyncStepRuntime"]

T = TypeVar("T")


class SyncJob(Job[T]):
    """A job claimed by ``sync.Jobs.drain`` (``drainpipe.sync.Job``): the same fields as
    :class:`drainpipe.Job`, whose step calls it has without ``await``. The sync worker
    hands its handler this class; everything that takes a ``Job`` takes it."""

    # The async Job's step calls are coroutines; here they return their values. The
    # signatures (names, parameters, defaults) are the async ones: tests/sync/test_surface.py
    # compares them. The return types differ by design, hence the overrides' ignores.

    def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` (a plain function) once over every run of this job
        and keep its result; a later run gets the kept value back without calling ``fn``."""
        return _workflow(self).step(self, name, fn, args, kwargs)

    def sleep(self, delay_or_until: float | timedelta | datetime) -> None:  # type: ignore[override]
        """Suspend the job until then: the run ends here (:class:`drainpipe.Suspend`)."""
        _workflow(self).sleep(self, delay_or_until)

    def wait_for(
        self,
        event: str,
        *,
        key: str,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """The data of the oldest unseen event ``event`` with ``key``, suspending until one
        comes; None after ``timeout``."""
        return _workflow(self).wait_for(self, event, key, timeout)

    def spawn(self, queue: str, payload: Any, **enqueue_options: Any) -> int:  # type: ignore[override]
        """Enqueue a child job once over every run (a step); its id."""
        ids: list[int] = _workflow(self).spawn_many(self, queue, [payload], enqueue_options)
        return ids[0]

    def spawn_many(self, queue: str, payloads: Any, **enqueue_options: Any) -> list[int]:  # type: ignore[override]
        """Enqueue several children at once (one step, one round trip); their ids."""
        ids: list[int] = _workflow(self).spawn_many(self, queue, payloads, enqueue_options)
        return ids

    def join(self, ids: Any, *, queue: str | None = None) -> list[ChildOutcome]:  # type: ignore[override]
        """Suspend until every child in ``ids`` finished; their outcomes in that order."""
        outcomes: list[ChildOutcome] = _workflow(self).join(self, ids, queue)
        return outcomes


def as_sync_job(job: Job[Any], runtime: SyncStepRuntime | None) -> SyncJob[Any]:
    """``job`` itself, its class made :class:`SyncJob` (same fields, same instance dict:
    the worker's own references see the same object), with the run's step runtime."""
    object.__setattr__(job, "__class__", SyncJob)
    if runtime is not None:
        job.__dict__["_workflow"] = runtime
    return job  # type: ignore[return-value]


class SyncStepRuntime(StepRules):
    """The steps of one queue's jobs during a sync drain: the shared rules, with the run's
    deadline as a ``time.monotonic()`` time, and the sync backend's round trips."""

    def __init__(self, jobs: Jobs, queue: str, *, step_margin: float = 5.0) -> None:
        super().__init__(jobs, queue, step_margin=step_margin)

    def _state(self, job: Job[Any]) -> RunState:
        state: RunState | None = job.__dict__.get(STATE)
        if state is None:
            state = RunState({} if first_run(job) else self.backend.load_steps(job.queue, job.id))
            job.__dict__[STATE] = state
        return state

    def _yield_if_low(self, job: Job[Any]) -> None:
        """Budget rule: with less than the margin left, suspend with immediate
        eligibility (state ``queued``) and end the run."""
        reason = self.budget_reason(job, time.monotonic())
        if reason is None:
            return
        if self.backend.suspend(job, 0.0, None) == "lost":
            raise lost(job)
        raise Suspend(None, budget=reason == "budget")

    def step(
        self, job: Job[Any], name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = check_name(name, "name")
        self._check_fn(fn)
        state = self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        if recorded is not None and recorded[1] == "done":
            return self._open(recorded[2])
        self._yield_if_low(job)
        started = self._now()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                close = getattr(value, "close", None)
                if close is not None:
                    close()  # never awaited: no "coroutine was never awaited" warning
                raise TypeError(
                    "a step of a sync handler must be a plain function; it returned an"
                    " awaitable (async steps belong to drainpipe.Jobs handlers)"
                )
        except Exception as exc:
            code = getattr(exc, "code", None)
            # recorded as failed for the record; the handler's error is the one reported
            with contextlib.suppress(Exception):
                self.backend.record_step(
                    job, number, name, "failed", None, code if isinstance(code, str) else None,
                    started,
                )  # fmt: skip
            raise
        stored, plain = self._store(value)
        answer = self.backend.record_step(job, number, name, "done", stored, None, started)
        if answer == "exists":  # recorded meanwhile by this very attempt: keep the stored one
            state.recorded = self.backend.load_steps(job.queue, job.id)
            return self._open(state.recorded[number][2])
        refused(job, number, name, answer)
        state.recorded[number] = (name, "done", stored)
        return plain

    def sleep(self, job: Job[Any], when: Any) -> None:
        delay = self._delay(when)
        state = self._state(job)
        number, recorded = state.take()
        if expect(job, number, "sleep", recorded) is not None:
            return  # slept already: the claim resumed it at (or after) its wake time
        answer = self.backend.suspend(job, delay, "time", number, "sleep", self._now())
        refused(job, number, "sleep", answer)
        raise Suspend("time")

    def wait_for(self, job: Job[Any], event: str, key: Any, timeout: Any) -> Any:
        name, wait = self._wait_args(event, key, timeout)
        state = self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        keyring = getattr(self._jobs, "keyring", None)
        if recorded is not None and recorded[1] == "done":
            return open_event(keyring, event, waited(recorded))
        outcome, data = self.backend.wait_event(job, event, key, wait, number, name, self._now())
        if outcome in ("taken", "timeout"):
            state.recorded[number] = (name, "done", {"data": data})
            # a sealed event (emitted by a Jobs with a keyring) fails clearly here
            return open_event(keyring, event, data)
        if outcome == "suspended":
            raise Suspend(f"event:{event}")
        refused(job, number, name, outcome)
        raise lost(job)

    def spawn_many(
        self, job: Job[Any], queue: str, payloads: Any, options: dict[str, Any]
    ) -> list[int]:
        stored, wait, max_attempts = self._spawn_args(queue, payloads, options)
        name = step_names("spawn", queue)
        state = self._state(job)
        number, recorded = state.take()
        recorded = expect(job, number, name, recorded)
        if recorded is not None and recorded[1] == "done":
            state.spawned.add(queue)
            return [int(i) for i in recorded[2]["ids"]]
        self._yield_if_low(job)
        outcome, ids = self.backend.spawn(
            job, number, name, queue, stored, wait, max_attempts, self._now()
        )
        refused(job, number, name, outcome)
        state.recorded[number] = (name, "done", {"queue": queue, "ids": ids})
        state.spawned.add(queue)
        return [int(i) for i in ids]

    def join(self, job: Job[Any], ids: Any, queue: str | None) -> list[ChildOutcome]:
        state = self._state(job)
        queue = self._join_queue(state, queue)
        children = [int(i) for i in ids]
        number, recorded = state.take()
        recorded = expect(job, number, "join", recorded)
        if recorded is None or recorded[1] != "done":
            outcome = self.backend.join(job, queue, children, number, "join", self._now())
            if outcome == "suspended":
                raise Suspend("children")
            refused(job, number, "join", outcome)
            state.recorded[number] = ("join", "done", {"queue": queue, "ids": children})
        return self._outcomes(queue, self.backend.child_outcomes(queue, children))

    def keep_result(self, job: Job[Any], value: Any) -> None:
        """Keep a handler's return value as the job's result (``jobs.result``); a value
        that is not JSON is not kept, one over ``max_payload_bytes`` fails the attempt."""
        stored = self._result_to_keep(value)
        if stored is None:
            return
        from ..backends.step_statements import RESULT_NAME, RESULT_NUMBER

        answer = self.backend.record_step(job, RESULT_NUMBER, RESULT_NAME, "done", stored)
        if answer == "lost":
            raise lost(job)
