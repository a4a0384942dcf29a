"""Durable workflows through a drain route under SIGKILL, CI-sized (~60-70 s, both storages
at once): three workflows of 60 steps of 0.1-0.3 s each (two durable sleeps, a fan-out and
a join), a real uvicorn serving ``jobs.drain_route`` and SIGKILLed every 6-12 s, paused
once past its leases while a second process takes over, and a cron calling it every 2.5 s
with a 2 s budget. Every workflow completes, and no step function runs again once its
record exists (tests/chaos/workflow_ledger.py says what is counted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster import ThrowawayCluster
from tests.chaos.workflow import WorkflowPlan, run_workflow_chaos
from tests.chaos.workflow_ledger import WorkflowFigures, settle


@pytest.mark.slow
@pytest.mark.timeout(360)
async def test_workflows_complete_through_a_killed_drain_route(
    cluster: ThrowawayCluster, tmp_path: Path
) -> None:
    plan = WorkflowPlan()
    for figures in await run_workflow_chaos(cluster, ["pgmq", "table"], plan, tmp_path / "logs"):
        report = "\n".join(figures.lines())
        assert figures.failures() == [], report
        assert figures.workflows == plan.workflows, report
        assert figures.steps_recorded == plan.workflows * (plan.steps + 3 * plan.children), report
        # the hostile events happened: kills, and a stale holder whose records were refused
        assert figures.kills >= 2 and figures.pauses == 1 and figures.stale_runs >= 1, report
        # the budget rule spread the workflows over many calls, each going on where the
        # last one stopped
        assert figures.calls_more >= 1 and figures.calls_ok >= 5, report


def _settle(
    lines: list[str], kept: dict[str, str], killed: frozenset[int] = frozenset()
) -> WorkflowFigures:
    """One flow (job 1) of two steps, ``a`` and ``b``, whose kept result is ``kept``."""
    return settle(
        WorkflowFigures("test"),
        [f"{line} 1.0" for line in lines],
        {("flows", 1): ["a", "b"]},
        {("flows", 1): ("succeeded", kept)},
        set(killed),
        {30},
    )


def test_the_ledger_tells_a_rerun_after_a_kill_from_a_run_after_the_record() -> None:
    # process 10 ran a to its end and was killed before the record; 20 ran it again
    rerun = _settle(
        [
            "B flows 1 a 10 10-1",
            "D flows 1 a 10 10-1",
            "B flows 1 a 20 20-1",
            "D flows 1 a 20 20-1",
            "B flows 1 b 20 20-2",
            "D flows 1 b 20 20-2",
        ],
        {"a": "20-1", "b": "20-2"},
        killed=frozenset({10}),
    )
    assert rerun.failures() == [] and rerun.rerun_after_kill == 1
    # a ran again after the run that was recorded: a second holder, or a replay that
    # did not use the record
    twice = _settle(
        [
            "B flows 1 a 10 10-1",
            "D flows 1 a 10 10-1",
            "B flows 1 a 20 20-1",
            "D flows 1 a 20 20-1",
            "B flows 1 b 20 20-2",
            "D flows 1 b 20 20-2",
        ],
        {"a": "10-1", "b": "20-2"},
    )
    assert twice.run_after_record == 1 and twice.failures() != []


def test_the_ledger_counts_stale_cut_and_missing_runs() -> None:
    figures = _settle(
        [
            "B flows 1 a 10 10-1",  # cut by a kill
            "B flows 1 a 30 30-1",  # the paused process: its record was refused
            "D flows 1 a 30 30-1",
            "B flows 1 a 40 40-1",
            "D flows 1 a 40 40-1",
            "B flows 1 b 50 50-1",  # not recorded, and 50 was neither killed nor paused
        ],
        {"a": "40-1"},
        killed=frozenset({10}),
    )
    assert (figures.cut_by_kill, figures.stale_runs) == (1, 1)
    assert (figures.unrecorded_without_kill, figures.steps_missing) == (1, 1)
    assert figures.failures() != []
