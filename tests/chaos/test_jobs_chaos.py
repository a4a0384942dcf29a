"""Jobs under chaos, both backends, CI-sized (~10 s each): 2,000 jobs enqueued while
worker processes are SIGKILLed three times, one is paused past its lease, every worker
session is terminated and the cluster crashes and comes back. Nothing is lost, no stale
completion is accepted, every job is completed once (runs may repeat: at-least-once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.cluster import ThrowawayCluster
from tests.chaos.jobs_run import JobsPlan, run_jobs_chaos
from tests.chaos.ledger import Figures, Ledger, settle_figures


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["pgmq", "table"])
async def test_nothing_is_lost_under_chaos(
    cluster: ThrowawayCluster, backend: str, tmp_path: Path
) -> None:
    plan = JobsPlan()
    figures = await run_jobs_chaos(cluster, backend, plan, tmp_path / "logs")
    report = "\n".join(figures.lines())
    assert figures.problems == [], report
    assert figures.jobs_in == plan.jobs, report
    assert figures.lost == 0 and figures.stale_accepted == 0, report
    poison = plan.jobs // plan.poison_every
    assert figures.dead == poison and figures.dead_not_poison == 0, report
    assert figures.completed == plan.jobs - poison, report
    # the events really happened, and the workers lived through them
    assert figures.worker_kills == len(plan.kills) and figures.worker_pauses == 1, report
    assert figures.sessions_terminated >= plan.workers and figures.outages == 1, report
    assert figures.worker_gave_up == 0, report
    # one worker is never killed: it lived through the session kill and the crash, and
    # went on working after them
    assert figures.survivor_processes == 1 and figures.survivor_jobs_after_outage > 0, report


def _settle(lines: list[str], enqueued: int = 3, dead: frozenset[int] = frozenset()) -> Figures:
    ledger = Ledger()
    for line in lines:
        ledger.add(line)
    return settle_figures(
        Figures("test"),
        ledger,
        enqueued=set(range(enqueued)),
        dead=set(dead),
        poison=set(),
        remaining=0,
    )


def test_the_ledger_counts_runs_and_finds_what_was_lost() -> None:
    figures = _settle(
        ["S 10 1 0", "E 10 1 0", "C 10 1 1", "S 11 1 1", "E 11 1 1", "S 11 2 1", "E 11 2 1"],
        dead=frozenset({2}),
    )
    assert (figures.completed, figures.lost, figures.run_more_than_once) == (2, 0, 1)
    lost = _settle(["S 10 1 0", "E 10 1 0", "S 11 1 1"])  # 1 started, never ended; 2 never ran
    assert (lost.completed, lost.lost) == (1, 2)


def test_the_ledger_finds_a_stale_completion_accepted() -> None:
    # attempt 1's completion accepted although attempt 2 had claimed the job: a broken fence
    stale = _settle(["S 10 1 0", "S 10 2 0", "E 10 1 0", "C 10 1 1", "E 10 2 0", "C 10 2 0"])
    assert stale.stale_accepted == 1 and stale.stale_refused == 1
    twice = _settle(["E 10 1 0", "C 10 1 1", "C 10 1 1"])
    assert twice.stale_accepted == 1
    # the probe completing a job nobody else claimed is a completion, not a stale one
    probe = _settle(["P 12 1 2", "E 10 1 0", "E 11 1 1"])
    assert (probe.completed, probe.lost, probe.stale_accepted) == (3, 0, 0)
