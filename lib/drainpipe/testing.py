"""Testing without Postgres, and the conformance kit for queue backends.

:class:`MemoryBackend` keeps jobs (and schedules) in memory with the SQL backends'
semantics, and :class:`Clock` is a clock a test moves by hand::

    clock = Clock()
    jobs = drainpipe.Jobs(MemoryBackend(now=clock), {"emails": Email}, now=clock)
    await jobs.enqueue("emails", Email(to="a@example.com"), delay=60)
    clock.advance(60)
    report = await jobs.drain("emails", send_email)

The conformance kit:

    report = await check_queue_backend(backend, queue="conformance")

runs every check below on ``queue`` (use a dedicated, empty queue: the checks send, read
and finish their own jobs and expect to see nothing else), and raises
:class:`ConformanceError` listing every failed check, or returns the report.

Checks, by name:

- ``name``: ``backend.name`` is a non-empty string;
- ``api_version``: ``backend.api_version == 1``;
- ``round_trip``: ``send`` returns an int id; a read with a 30 s lease returns that id with
  the same payload, ``attempts == 1`` and the ``max_attempts`` sent; ``complete`` → True;
- ``lease_hides_message``: a second read while the lease runs returns nothing;
- ``stale_completion`` (backends with leases): ``complete`` with ``attempts + 1`` → False,
  ``extend(job, 60)`` → True, then ``complete`` → True;
- ``fail_then_dead``: with ``max_attempts=2``, ``fail`` → ``"queued"``, the job comes back
  with ``attempts == 2`` (without leases, after a short lease ends: about a second),
  ``fail`` → ``"dead"``, and a further read returns nothing;
- ``dedupe`` (when ``dedupe``, default ``backend.leases``): two sends with the same
  dedupe key return the same id.

Backends whose clock a test can move (an ``advance_time(seconds)`` method, plain or async,
such as :class:`MemoryBackend` over a :class:`Clock`) get two more checks that move time
instead of waiting for it; other backends are checked exactly as above:

- ``lease_expiry`` (with leases): after a 30 s lease runs out the job is read again with
  ``attempts == 2``; ``complete`` of the first read's job → False, of the second → True;
- ``delay``: a job sent with ``delay=60`` is not read before 60 s have passed, then is.

Backends with job records (``get_record``, ``list_records``, ``cancel``, ``replay``) get the
checks of :mod:`drainpipe.backends.conformance_records` (``records_states``,
``records_cancel``, ``records_replay``, ``records_list``); for others one ``records`` check
is reported as skipped.

Flow control (docs/flow-control.md) is the database's: :class:`MemoryBackend` refuses a
policy with limits, a priority, debounce and throttle, naming what it refused, rather than
pretend to hold them. :func:`without_flow_control` gives it the rest of an application's
policies::

    jobs = drainpipe.Jobs(MemoryBackend(), QUEUES, policies=without_flow_control(POLICIES))
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .backends.conformance_records import RECORD_CHECKS
from .backends.memory import Clock, MemoryBackend, retry_delay
from .backends.reduced import as_driver
from .jobs.policy import QueuePolicy
from .models import Job

__all__ = [
    "CheckResult",
    "Clock",
    "ConformanceError",
    "ConformanceReport",
    "MemoryBackend",
    "check_queue_backend",
    "retry_delay",
    "without_flow_control",
]

#: what the record checks call: a backend with all of them is checked, else they are skipped
_RECORD_OPERATIONS = ("get_record", "list_records", "cancel", "replay")


API_VERSION = 1


def without_flow_control(policies: Mapping[str, QueuePolicy]) -> dict[str, QueuePolicy]:
    """``policies`` with their flow limits (``concurrency``, ``key_concurrency``, ``rate``,
    ``key_rate``, ``ordered``) taken out and every other field kept: what
    :class:`MemoryBackend` accepts from an application's policies."""
    return {
        queue: replace(
            policy, concurrency=None, key_concurrency=None, rate=None, key_rate=None, ordered=False
        )
        for queue, policy in policies.items()
    }


_LONG_LEASE = 30.0
_WAIT_SLACK = 2.0  # seconds past a lease end we wait for a message to reappear


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check: ``ok`` False comes with a ``message`` saying what was seen instead; a
    ``skipped`` check counts as passed and its ``message`` says why it did not run."""

    name: str
    ok: bool
    message: str | None = None
    skipped: bool = False


@dataclass(slots=True)
class ConformanceReport:
    """What :func:`check_queue_backend` found, for ``QueueBackend "<name>"``."""

    subject: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok]

    def __str__(self) -> str:
        lines = [f"{self.subject}: {len(self.failures)} of {len(self.checks)} checks failed"]
        for check in self.checks:
            status = "skipped" if check.skipped else ("ok" if check.ok else "FAILED")
            lines.append(
                f"- {check.name}: {status}" + (f": {check.message}" if check.message else "")
            )
        return "\n".join(lines)


class ConformanceError(AssertionError):
    """A backend failed conformance checks; ``report`` has every check, ``failures`` the
    failed ones. An ``AssertionError`` so test runners show it as a test failure."""

    def __init__(self, report: ConformanceReport) -> None:
        self.report = report
        self.failures = report.failures
        listed = "\n".join(f"- {check.name}: {check.message}" for check in self.failures)
        super().__init__(
            f"{report.subject} failed {len(self.failures)} of {len(report.checks)} "
            f"conformance checks:\n{listed}"
        )


class _Check:
    """Collects what went wrong in one check; a check keeps going after a failed
    expectation only where the rest still makes sense."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.problems: list[str] = []

    def expect(self, condition: bool, problem: str) -> bool:
        if not condition:
            self.problems.append(problem)
        return condition

    def result(self) -> CheckResult:
        return CheckResult(self.name, not self.problems, "; ".join(self.problems) or None)


def _describe(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {exc}"


def _ids(jobs: list[Job[Any]]) -> list[int]:
    return [job.id for job in jobs]


async def _read_until(backend: Any, queue: str, *, lease: float, within: float) -> list[Job[Any]]:
    """Read until something comes back or ``within`` seconds pass (a retried job becomes
    visible again only when its lease or backoff ends)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        jobs: list[Job[Any]] = await backend.read(queue, lease=lease, batch=1)
        if jobs or loop.time() >= deadline:
            return jobs
        await asyncio.sleep(0.05)


async def _round_trip(backend: Any, queue: str, trip: _Check, hides: _Check) -> None:
    payload = {"n": 1, "check": "round_trip"}
    job_id = await backend.send(queue, payload, delay=0, max_attempts=3)
    if not trip.expect(
        isinstance(job_id, int) and not isinstance(job_id, bool),
        f"send() returned {job_id!r}; expected an int id",
    ):
        return
    jobs = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    if not trip.expect(
        _ids(jobs) == [job_id],
        f"read(lease=30) returned ids {_ids(jobs)}; expected [{job_id}] "
        "(is the queue empty and used by nothing else?)",
    ):
        return
    job = jobs[0]
    trip.expect(
        job.payload == payload, f"payload read back was {job.payload!r}; expected {payload!r}"
    )
    trip.expect(job.attempts == 1, f"attempts on the first read was {job.attempts}; expected 1")
    trip.expect(job.max_attempts == 3, f"max_attempts read back was {job.max_attempts}; expected 3")
    trip.expect(job.queue == queue, f"job.queue was {job.queue!r}; expected {queue!r}")
    again = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    hides.expect(
        not again, f"a second read during the 30 s lease returned ids {_ids(again)}; expected none"
    )
    done = await backend.complete(job)
    trip.expect(done is True, f"complete() returned {done!r}; expected True")


async def _stale_completion(backend: Any, queue: str, check: _Check) -> None:
    from dataclasses import replace

    job_id = await backend.send(
        queue, {"n": 2, "check": "stale_completion"}, delay=0, max_attempts=3
    )
    jobs = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    if not check.expect(
        _ids(jobs) == [job_id], f"read returned ids {_ids(jobs)}; expected [{job_id}]"
    ):
        return
    job = jobs[0]
    stale = replace(job, attempts=job.attempts + 1)
    refused = await backend.complete(stale)
    check.expect(
        refused is False,
        f"complete() with a stale attempt ({stale.attempts}, held: {job.attempts}) returned "
        f"{refused!r}; expected False",
    )
    extended = await backend.extend(job, 60)
    check.expect(extended is True, f"extend(job, 60) returned {extended!r}; expected True")
    done = await backend.complete(job)
    check.expect(done is True, f"complete() with the held attempt returned {done!r}; expected True")


async def _fail_then_dead(backend: Any, queue: str, check: _Check, short_lease: float) -> None:
    # without leases a failed job comes back only when its lease ends, so keep it short
    lease = _LONG_LEASE if backend.leases else short_lease
    wait = (0 if backend.leases else math.ceil(lease)) + _WAIT_SLACK
    job_id = await backend.send(queue, {"n": 3, "check": "fail_then_dead"}, delay=0, max_attempts=2)
    jobs = await backend.read(queue, lease=lease, batch=1)
    if not check.expect(
        _ids(jobs) == [job_id], f"read returned ids {_ids(jobs)}; expected [{job_id}]"
    ):
        return
    outcome = await backend.fail(jobs[0], "boom", 0)
    if not check.expect(
        outcome == "queued", f'fail() on attempt 1 of 2 returned {outcome!r}; expected "queued"'
    ):
        return
    again = await _read_until(backend, queue, lease=lease, within=wait)
    if not check.expect(
        _ids(again) == [job_id],
        f"after fail() the job did not come back within {wait:g} s (read returned ids {_ids(again)})",
    ):
        return
    retried = again[0]
    check.expect(
        retried.attempts == 2, f"attempts on the re-read was {retried.attempts}; expected 2"
    )
    outcome = await backend.fail(retried, "boom again", 0)
    check.expect(
        outcome == "dead", f'fail() on attempt 2 of 2 returned {outcome!r}; expected "dead"'
    )
    after = await backend.read(queue, lease=lease, batch=1)
    check.expect(not after, f"a read after the job died returned ids {_ids(after)}; expected none")


async def _advance(advance_time: Callable[[float], Any], seconds: float) -> None:
    moved = advance_time(seconds)
    if inspect.isawaitable(moved):
        await moved


async def _lease_expiry(
    backend: Any, queue: str, check: _Check, advance_time: Callable[[float], Any]
) -> None:
    job_id = await backend.send(queue, {"n": 6, "check": "lease_expiry"}, delay=0, max_attempts=3)
    jobs = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    if not check.expect(
        _ids(jobs) == [job_id], f"read returned ids {_ids(jobs)}; expected [{job_id}]"
    ):
        return
    await _advance(advance_time, _LONG_LEASE + 1)
    again = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    if not check.expect(
        _ids(again) == [job_id],
        f"after the 30 s lease ran out a read returned ids {_ids(again)}; expected [{job_id}]",
    ):
        return
    check.expect(
        again[0].attempts == 2, f"attempts on the re-read was {again[0].attempts}; expected 2"
    )
    stale = await backend.complete(jobs[0])
    check.expect(
        stale is False,
        f"complete() by the holder whose lease ran out returned {stale!r}; "
        "expected False (the job was read again)",
    )
    done = await backend.complete(again[0])
    check.expect(done is True, f"complete() by the new holder returned {done!r}; expected True")


async def _delay(
    backend: Any, queue: str, check: _Check, advance_time: Callable[[float], Any]
) -> None:
    job_id = await backend.send(queue, {"n": 7, "check": "delay"}, delay=60, max_attempts=3)
    early = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    check.expect(not early, f"a read before the 60 s delay ended returned ids {_ids(early)}")
    await _advance(advance_time, 60)
    jobs = await backend.read(queue, lease=_LONG_LEASE, batch=1)
    if check.expect(
        _ids(jobs) == [job_id],
        f"a read after the 60 s delay returned ids {_ids(jobs)}; expected [{job_id}]",
    ):
        await backend.complete(jobs[0])


async def _dedupe(backend: Any, queue: str, check: _Check) -> None:
    first = await backend.send(queue, {"n": 4}, delay=0, max_attempts=3, dedupe_key="same")
    second = await backend.send(queue, {"n": 5}, delay=0, max_attempts=3, dedupe_key="same")
    check.expect(
        first == second, f'two sends with dedupe key "same" returned ids {first!r} and {second!r}'
    )
    # leave the queue empty for whoever runs next
    for job in await backend.read(queue, lease=_LONG_LEASE, batch=10):
        await backend.complete(job)


async def check_queue_backend(
    backend: Any,
    *,
    queue: str,
    dedupe: bool | None = None,
    short_lease: float = 1.0,
) -> ConformanceReport:
    """Run the conformance checks (see the module docstring) on ``queue``.

    ``dedupe`` defaults to ``backend.leases``. ``short_lease`` (seconds) is the lease used
    where a backend without leases must let a failed job come back; the run then takes
    about that long. Raises :class:`ConformanceError` listing every failed check; returns
    the :class:`ConformanceReport` when all pass. An exception inside a check fails that
    check (its message says what was raised) and the other checks still run.
    """
    name = getattr(backend, "name", None)
    report = ConformanceReport(f'QueueBackend "{name}"')
    named = isinstance(name, str) and bool(name)
    report.checks.append(
        CheckResult(
            "name", named, None if named else f"name is {name!r}; expected a non-empty string"
        )
    )
    version = getattr(backend, "api_version", None)
    report.checks.append(
        CheckResult(
            "api_version",
            version == API_VERSION,
            None
            if version == API_VERSION
            else f"api_version is {version!r}; expected {API_VERSION}",
        )
    )
    leases = bool(getattr(backend, "leases", False))
    if dedupe is None:
        dedupe = leases

    trip, hides = _Check("round_trip"), _Check("lease_hides_message")
    try:
        await _round_trip(backend, queue, trip, hides)
    except Exception as exc:
        trip.problems.append(_describe(exc))
    report.checks += [trip.result(), hides.result()]

    if leases:
        report.checks.append(await _run("stale_completion", _stale_completion, backend, queue))
    else:
        report.checks.append(
            CheckResult("stale_completion", True, "the backend has no leases", skipped=True)
        )
    report.checks.append(await _run("fail_then_dead", _fail_then_dead, backend, queue, short_lease))
    if dedupe:
        report.checks.append(await _run("dedupe", _dedupe, backend, queue))
    else:
        report.checks.append(CheckResult("dedupe", True, "dedupe keys not supported", skipped=True))
    advance_time = getattr(backend, "advance_time", None)
    if callable(advance_time):
        if leases:
            report.checks.append(
                await _run("lease_expiry", _lease_expiry, backend, queue, advance_time)
            )
        report.checks.append(await _run("delay", _delay, backend, queue, advance_time))
    if not as_driver(backend).lacks.intersection(_RECORD_OPERATIONS):
        for check_name, check_fn in RECORD_CHECKS:
            report.checks.append(await _run(check_name, check_fn, backend, queue))
    else:
        report.checks.append(
            CheckResult("records", True, "the backend keeps no job records", skipped=True)
        )
    if not report.ok:
        raise ConformanceError(report)
    return report


async def _run(name: str, check_fn: Any, backend: Any, queue: str, *args: Any) -> CheckResult:
    check = _Check(name)
    try:
        await check_fn(backend, queue, check, *args)
    except Exception as exc:
        check.problems.append(_describe(exc))
    return check.result()
