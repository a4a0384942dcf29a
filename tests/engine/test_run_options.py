"""``work``/``drain`` options are checked in one place (``engine.core.RunOptions``): both
twins answer the same error, with the same message, for the same wrong value, before any
SQL is sent; and the values a run gets are normalised the same way."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import drainpipe
from drainpipe import DrainpipeError, sync
from drainpipe.engine.core import RunOptions

QUEUES: dict[str, Any] = {"raw": dict[str, Any]}
#: nothing listens on port 1: a check that sent SQL would fail with a network error instead
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/none"

WRONG: list[dict[str, Any]] = [
    {"concurrency": 0},
    {"batch": True},
    {"lease": -1},
    {"heartbeat_every": 0},
    {"step_margin": -1},
]
WRONG_FOR_DRAIN: list[dict[str, Any]] = [{"budget": float("nan")}]
WRONG_FOR_WORK: list[dict[str, Any]] = [
    {"poll_interval": -1},
    {"max_poll_interval": "soon"},
    {"max_outage": -1},
]


def _async_error(call: str, options: dict[str, Any]) -> DrainpipeError:
    async def run() -> None:
        jobs = drainpipe.Jobs(UNREACHABLE, QUEUES)

        async def handler(payload: Any, job: Any) -> None: ...

        await getattr(jobs, call)("raw", handler, **options)

    with pytest.raises(DrainpipeError) as caught:
        asyncio.run(run())
    return caught.value


def _sync_error(call: str, options: dict[str, Any]) -> DrainpipeError:
    if call == "work":
        options = {"stop": threading.Event(), **options}
    with sync.Jobs(UNREACHABLE, QUEUES) as jobs, pytest.raises(DrainpipeError) as caught:
        getattr(jobs, call)("raw", lambda payload, job: None, **options)
    return caught.value


@pytest.mark.parametrize(
    ("call", "options"),
    [("drain", o) for o in WRONG + WRONG_FOR_DRAIN] + [("work", o) for o in WRONG + WRONG_FOR_WORK],
)
def test_both_twins_refuse_a_wrong_option_with_one_error(
    call: str, options: dict[str, Any]
) -> None:
    async_error, sync_error = _async_error(call, options), _sync_error(call, options)
    assert async_error.kind == sync_error.kind == "validation"
    assert str(async_error) == str(sync_error)
    assert next(iter(options)) in str(sync_error)


def test_the_options_are_normalised_once() -> None:
    options = RunOptions.checked(
        concurrency=2, batch=3, lease=4.0, poll_interval=5, max_poll_interval=1, step_margin=9
    )
    assert options.max_poll_interval == 5  # never below poll_interval
    assert options.step_margin == 2.0  # at most half a fixed lease
    assert (options.budget, options.heartbeat_every, options.max_outage) == (None, None, None)


def test_a_lease_callable_has_each_answer_checked() -> None:
    answers = iter([30.0, -1.0])
    options = RunOptions.checked(concurrency=1, batch=1, lease=lambda: next(answers))
    assert callable(options.lease)
    assert options.lease() == 30.0
    with pytest.raises(DrainpipeError) as caught:
        options.lease()
    assert caught.value.kind == "validation"
