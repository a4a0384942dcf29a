"""What a chaos run did, from the workers' logs (tests/chaos/worker.py) and the database:
the figures ``scripts/chaos`` prints and the assertions of ``tests/chaos``.

Definitions (per job ``i``, the payload's number, unique per enqueued job):

* **completed**: a handler ran to its end at least once and the job is not a dead letter
  (nothing is left in the queue when the run ends, so its completion was accepted);
* **lost**: enqueued, never run to its end, not a dead letter and not in the queue any more;
* **run more than once**: a handler ran to its end more than once (at-least-once delivery:
  a worker killed, paused or cut off between its handler's end and its completion);
* **stale completion accepted**: the database accepted a completion for attempt *k* of a
  job that was also claimed as attempt *k' > k*, or accepted two completions of one job;
* **stale completions refused**: completions the database refused (the fenced settlement
  found another attempt), from workers and from the run's probe.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path


@dataclasses.dataclass
class Figures:
    backend: str
    jobs_in: int = 0
    completed: int = 0
    dead: int = 0
    dead_not_poison: int = 0
    lost: int = 0
    run_more_than_once: int = 0
    stale_refused: int = 0
    stale_accepted: int = 0
    lease_lost_reports: int = 0
    retries_reported: int = 0
    worker_kills: int = 0
    worker_pauses: int = 0
    sessions_terminated: int = 0
    outages: int = 0
    outage_seconds: float = 0.0
    worker_gave_up: int = 0
    survivor_processes: int = 0  # processes the never-killed worker took (1: it lived)
    survivor_jobs_after_outage: int = 0  # jobs it ran to their end after the outage
    seconds: float = 0.0
    problems: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"backend {self.backend}: {self.seconds:.0f} s",
            f"  jobs in                      {self.jobs_in}",
            f"  completed                    {self.completed}",
            f"  dead                         {self.dead} ({self.dead_not_poison} not poison)",
            f"  lost                         {self.lost}",
            f"  run more than once           {self.run_more_than_once}",
            f"  stale completions refused    {self.stale_refused}",
            f"  stale completions accepted   {self.stale_accepted}",
            f"  lease-lost reports           {self.lease_lost_reports}",
            f"  retries reported             {self.retries_reported}",
            f"  workers SIGKILLed            {self.worker_kills}",
            f"  workers paused past lease    {self.worker_pauses}",
            f"  sessions terminated          {self.sessions_terminated}",
            f"  outages                      {self.outages} ({self.outage_seconds:.0f} s down)",
            f"  workers that gave up         {self.worker_gave_up}",
            f"  the never-killed worker      {'lived' if self.survivor_processes == 1 else 'DIED'};"
            f" {self.survivor_jobs_after_outage} jobs done after the outage",
            *(f"  PROBLEM: {problem}" for problem in self.problems),
        ]


@dataclasses.dataclass
class Ledger:
    """The workers' log lines, gathered."""

    ended: dict[int, int] = dataclasses.field(default_factory=Counter)  # i -> handler ends
    claims: dict[int, set[int]] = dataclasses.field(default_factory=lambda: defaultdict(set))
    accepted: dict[int, list[int]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    probe_done: set[int] = dataclasses.field(default_factory=set)  # i the probe completed
    refused: int = 0
    lease_lost: int = 0
    errors: int = 0
    gave_up: list[str] = dataclasses.field(default_factory=list)

    def read(self, paths: Iterable[Path]) -> Ledger:
        for path in paths:
            for line in path.read_text().splitlines():
                self.add(line)
        return self

    def add(self, line: str) -> None:
        tag, _, rest = line.partition(" ")
        fields = rest.split(" ")
        if tag == "S":
            self.claims[int(fields[0])].add(int(fields[1]))
        elif tag == "E":
            self.claims[int(fields[0])].add(int(fields[1]))
            self.ended[int(fields[2])] += 1
        elif tag == "C":
            if fields[2] == "1":
                self.accepted[int(fields[0])].append(int(fields[1]))
            else:
                self.refused += 1
        elif tag == "P":  # the probe's completion was accepted: nobody else had claimed it
            self.claims[int(fields[0])].add(int(fields[1]))
            self.accepted[int(fields[0])].append(int(fields[1]))
            self.probe_done.add(int(fields[2]))
        elif tag == "L":
            self.lease_lost += 1
        elif tag == "X":
            self.errors += 1
        elif tag == "R":
            pass
        elif tag == "F":
            self.gave_up.append(rest)
        # a line cut short by SIGKILL mid-write cannot happen: each is one write(2)

    def stale_accepted(self) -> list[str]:
        found = []
        for job_id, attempts in self.accepted.items():
            if len(attempts) > 1:
                found.append(f"job {job_id}: completions of attempts {attempts} all accepted")
            later = [a for a in self.claims.get(job_id, ()) if a > min(attempts)]
            if later:
                found.append(
                    f"job {job_id}: completion of attempt {min(attempts)} accepted, "
                    f"attempts {sorted(later)} claimed too"
                )
        return found


def settle_figures(
    figures: Figures,
    ledger: Ledger,
    *,
    enqueued: set[int],
    dead: set[int],
    poison: set[int],
    remaining: int,
) -> Figures:
    """Fill in the job figures from the ledger and what the database says at the end."""
    stale = ledger.stale_accepted()
    probe_done = ledger.probe_done
    figures.jobs_in = len(enqueued)
    figures.dead = len(dead)
    figures.dead_not_poison = len(dead - poison)
    ran = {i for i, n in ledger.ended.items() if n > 0}
    figures.completed = len((ran | probe_done) & (enqueued - dead))
    figures.lost = max(0, len(enqueued - ran - probe_done - dead) - remaining)
    figures.run_more_than_once = sum(1 for n in ledger.ended.values() if n > 1)
    figures.stale_refused = ledger.refused
    figures.stale_accepted = len(stale)
    figures.lease_lost_reports = ledger.lease_lost
    figures.retries_reported = ledger.errors
    figures.worker_gave_up += len(ledger.gave_up)
    figures.problems += stale[:10] + [f"a worker gave up: {line}" for line in ledger.gave_up[:5]]
    if remaining:
        figures.problems.append(f"{remaining} job(s) still in the queue when the run ended")
    return figures
