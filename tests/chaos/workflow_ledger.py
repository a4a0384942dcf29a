"""The figures of a workflow chaos run, from the run's log (tests/chaos/workflow_app.py) and
the jobs' kept results.

What "exactly once" means here. An *execution* of a step is one call of its function, from
its ``B`` line; it *ran to its end* when its ``D`` line was written. The *recorded*
execution is the one whose nonce the job's stored step value holds (the handler returns
every step's value: its kept result). Then, per step of every job:

* **steps run after their record** (must be 0): executions that began after the recorded
  one began, in the log's single order. Such an execution ran either once the record
  existed (replay broken) or next to the recorded one, in a second holder of the job
  (fencing broken). Either way the step's function ran again although it had a record.
* **recorded, never ended** (must be 0): the recorded nonce has no ``D`` line.
* **re-run after a kill before the record** (reported): executions other than the
  recorded one that ran to their end in a process the run SIGKILLed: the function
  returned, the process died before the record was written, and the next run ran it again.
  That is at-least-once by design (docs/steps.md, "What run once means").
* **cut by a kill** (reported): executions that began but never ended, in a killed process.
* **stale holder's runs** (reported): executions not recorded in a process the run paused
  (SIGSTOP) past its leases and then resumed: another process had taken the job over, so
  the stale one's record must be refused (fencing), or stopped by its heartbeat.
* **unrecorded without a kill** (must be 0): an execution not recorded (ended or not) in a
  process nobody killed or paused: the record was refused or lost while its process lived.
* **steps missing** (must be 0): a step of the workflow's shape with no recorded value.

The longest step gap is the longest time, in any job, from the end of one recorded step
to the start of the next one: durable sleeps, children, kills and waits for the next cron
call all show there.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

Key = tuple[str, int, str]  # queue, job id, step name


@dataclasses.dataclass
class Execution:
    order: int
    pid: int
    began: float
    ended: float | None = None


@dataclasses.dataclass
class WorkflowFigures:
    storage: str
    seconds: float = 0.0
    workflows: int = 0
    workflows_completed: int = 0
    children: int = 0
    children_completed: int = 0
    steps: int = 0  # steps of the jobs' shapes
    steps_recorded: int = 0
    executions: int = 0
    run_after_record: int = 0
    recorded_not_ended: int = 0
    rerun_after_kill: int = 0
    cut_by_kill: int = 0
    stale_runs: int = 0
    unrecorded_without_kill: int = 0
    steps_missing: int = 0
    handler_runs: int = 0
    kills: int = 0
    pauses: int = 0
    server_starts: int = 0
    calls: int = 0
    calls_ok: int = 0
    calls_more: int = 0
    calls_failed: int = 0  # no answer: the server was killed during the call, or was down
    calls_5xx: int = 0
    longest_gap: float = 0.0
    longest_gap_at: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)

    def failures(self) -> list[str]:
        """What must be 0 and is not, and every problem of the run."""
        wrong = [
            f"{name} = {getattr(self, name)}"
            for name in (
                "run_after_record",
                "recorded_not_ended",
                "unrecorded_without_kill",
                "steps_missing",
                "calls_5xx",
            )
            if getattr(self, name)
        ]
        if self.workflows_completed != self.workflows:
            wrong.append(f"{self.workflows_completed} of {self.workflows} workflows completed")
        if self.children_completed != self.children:
            wrong.append(f"{self.children_completed} of {self.children} children completed")
        return wrong + self.problems

    def lines(self) -> list[str]:
        return [
            f"[{self.storage}] {self.seconds:.0f} s",
            f"  workflows completed: {self.workflows_completed} / {self.workflows}"
            f" (children {self.children_completed} / {self.children})",
            f"  steps recorded: {self.steps_recorded} / {self.steps};"
            f" step executions begun: {self.executions}",
            f"  steps run after their record: {self.run_after_record} (must be 0)",
            f"  recorded, never ended: {self.recorded_not_ended} (must be 0)",
            f"  unrecorded without a kill: {self.unrecorded_without_kill} (must be 0)",
            f"  steps missing: {self.steps_missing} (must be 0)",
            f"  re-run after a kill before the record: {self.rerun_after_kill}",
            f"  cut by a kill (began, never ended): {self.cut_by_kill}",
            f"  a stale holder's runs, not recorded (paused past the lease): {self.stale_runs}",
            f"  handler runs (resumptions included): {self.handler_runs}",
            f"  server SIGKILLs: {self.kills}; paused past the lease: {self.pauses};"
            f" server starts: {self.server_starts}",
            f"  route calls: {self.calls}: answered {self.calls_ok} ({self.calls_more}"
            f" with more=true), no answer {self.calls_failed}, 5xx {self.calls_5xx}",
            f"  longest step gap: {self.longest_gap:.1f} s ({self.longest_gap_at})",
            *(f"  PROBLEM: {p}" for p in self.problems),
        ]


def read_executions(lines: Iterable[str]) -> tuple[dict[Key, dict[str, Execution]], int]:
    """Every step execution by (queue, job, step) and nonce, and the count of handler runs."""
    executions: dict[Key, dict[str, Execution]] = defaultdict(dict)
    handler_runs = 0
    for order, line in enumerate(lines):
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "H":
            handler_runs += 1
        elif fields[0] in ("B", "D"):
            kind, queue, job_id, step, pid, nonce, at = fields
            key = (queue, int(job_id), step)
            if kind == "B":
                executions[key][nonce] = Execution(order, int(pid), float(at))
            else:
                executions[key][nonce].ended = float(at)
    return executions, handler_runs


def settle(
    figures: WorkflowFigures,
    lines: list[str],
    expected: Mapping[tuple[str, int], list[str]],
    results: Mapping[tuple[str, int], tuple[str, Any]],
    killed: set[int],
    paused: set[int],
) -> WorkflowFigures:
    """``expected``: each job's step names in order; ``results``: each job's state and kept
    result (step name → nonce); ``killed``, ``paused``: the pids the run SIGKILLed, and
    paused past their leases."""
    executions, figures.handler_runs = read_executions(lines)
    figures.executions = sum(len(runs) for runs in executions.values())
    for (queue, job_id), names in expected.items():
        state, result = results.get((queue, job_id), ("missing", None))
        kept = result if isinstance(result, dict) else {}
        if queue == "flows":
            figures.workflows += 1
            figures.workflows_completed += state == "succeeded"
        else:
            figures.children += 1
            figures.children_completed += state == "succeeded"
        figures.steps += len(names)
        previous_end: float | None = None
        for name in names:
            runs = executions.get((queue, job_id, name), {})
            nonce = kept.get(name)
            recorded = runs.get(nonce) if isinstance(nonce, str) else None
            for other_nonce, run in runs.items():
                if other_nonce == nonce:
                    continue
                if recorded is not None and run.order > recorded.order:
                    figures.run_after_record += 1
                elif run.pid in paused:
                    figures.stale_runs += 1
                elif run.pid not in killed:
                    figures.unrecorded_without_kill += 1
                elif run.ended is not None:
                    figures.rerun_after_kill += 1
                else:
                    figures.cut_by_kill += 1
            if recorded is None:
                figures.steps_missing += 1
                previous_end = None
                continue
            figures.steps_recorded += 1
            if recorded.ended is None:
                figures.recorded_not_ended += 1
            if previous_end is not None and recorded.began - previous_end > figures.longest_gap:
                figures.longest_gap = recorded.began - previous_end
                figures.longest_gap_at = f"{queue} job {job_id} before {name}"
            previous_end = recorded.ended
    return figures
