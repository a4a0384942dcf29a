"""Replay rules over PostgREST (emulated by respx on real Postgres, both storages): the rules
stored over HTTPS refuse a replay with the codes of a direct connection, through
``replay_v3``/``retry_dead_v2``, also under the backend's rule-less ``replay``; declared
rules travel with each call; ``replay_check`` runs too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from drainpipe import DrainpipeError, JobRecord, Jobs, QueuePolicy
from drainpipe.backends.capabilities import SupportsReplayRules
from drainpipe.backends.postgrest import PostgrestBackend
from tests.jobs.postgrest_emulation import (
    BASE,
    SERVICE_KEY,
    PostgrestEmulation,
    postgrest_emulation,
)
from tests.policies.test_replay_rules import age, dead_job

QUEUES: dict[str, Any] = {"pushes": dict[str, Any], "hooks": dict[str, Any]}


@pytest.fixture
async def server(jobs_db_url: str) -> AsyncIterator[PostgrestEmulation]:
    async with postgrest_emulation(jobs_db_url) as (emulation, _):
        yield emulation


@pytest.fixture
async def backend(server: PostgrestEmulation) -> AsyncIterator[PostgrestBackend]:
    async with PostgrestBackend(BASE, SERVICE_KEY) as made:
        yield made


async def test_stored_rules_refuse_replays_over_https(
    backend: PostgrestBackend, server: PostgrestEmulation, jobs_db_url: str, backend_name: str
) -> None:
    assert isinstance(backend, SupportsReplayRules)
    policies = {"pushes": QueuePolicy(replayable=False), "hooks": QueuePolicy(replay_window=600)}
    declared = Jobs(backend, QUEUES, policies=policies)
    assert await declared.ensure_policies() == 2
    assert server.calls()[-1] == (
        "ensure_policy_v3",
        {
            "queue": "hooks",
            **{"max_payload_bytes": 65536, "max_pending": 10000, "lease": 30.0},
            **{"max_lease": 60.0, "max_delay": 604800.0, "max_attempts": 5},
            **{"attempt_window": None, "retention": 2592000.0, "encrypt": False},
            **{"replay_window": 600.0, "replayable": True},
            **{"concurrency": None, "key_concurrency": None, "rate_count": None},
            **{"rate_per": None, "key_rate_count": None, "key_rate_per": None},
            **{"ordered": False},
        },
    )
    over_https = Jobs(backend, QUEUES)  # declares nothing: the stored rules decide
    push = await dead_job(over_https, "pushes", {"event_id": "p"})
    old = await dead_job(over_https, "hooks", {"event_id": "old"})
    fresh = await dead_job(over_https, "hooks", {"event_id": "fresh"})
    await age(jobs_db_url, backend_name, "hooks", old, days=1)
    codes = []
    for queue, job_id in (("pushes", push), ("hooks", old)):
        with pytest.raises(DrainpipeError) as caught:
            await over_https.replay(queue, job_id)
        codes.append((caught.value.kind, caught.value.code, caught.value.status))
    assert codes == [("conflict", "REPLAY_BLOCKED", 409), ("conflict", "EVENT_EXPIRED", 409)]
    assert server.calls()[-1][0] == "replay_v3"
    # the backend's own replay (no declared rules): the stored ones refuse it alike
    for queue, job_id, code in (
        ("pushes", push, "REPLAY_BLOCKED"),
        ("hooks", old, "EVENT_EXPIRED"),
    ):
        with pytest.raises(DrainpipeError) as old_path:
            await backend.replay(queue, job_id)
        assert (old_path.value.kind, old_path.value.code) == ("conflict", code)
    report = await over_https.retry_dead("hooks")
    assert report == 1 and list(report.replayed) == [fresh]
    assert dict(report.refused) == {old: "EVENT_EXPIRED"}
    assert server.calls()[-1][0] == "retry_dead_v2"
    await declared.close()
    await over_https.close()


async def test_declared_rules_and_the_check_travel_over_https(
    backend: PostgrestBackend, server: PostgrestEmulation
) -> None:
    def check(record: JobRecord) -> str | None:
        return "KEY_REVOKED" if record.tenant == "revoked" else None

    declared = {"pushes": QueuePolicy(replayable=False), "hooks": QueuePolicy(replay_window=60)}
    jobs = Jobs(backend, QUEUES, policies=declared, replay_check=check)
    push = await dead_job(jobs, "pushes", {"event_id": "p"})
    with pytest.raises(DrainpipeError) as blocked:
        await jobs.replay("pushes", push)  # nothing stored: the declared rule travelled
    assert blocked.value.code == "REPLAY_BLOCKED"
    assert server.calls()[-1] == (
        "replay_v3",
        {"queue": "pushes", "id": push, "replay_window": None, "replayable": False},
    )
    revoked = await dead_job(jobs, "hooks", {"event_id": "r"}, tenant="revoked")
    with pytest.raises(DrainpipeError) as caught:
        await jobs.replay("hooks", revoked)
    assert (caught.value.status, caught.value.code) == (409, "KEY_REVOKED")
    allowed = await dead_job(jobs, "hooks", {"event_id": "a"}, tenant="fine")
    child = await jobs.replay("hooks", allowed)
    assert child is not None
    assert server.calls()[-1][1]["replay_window"] == 60.0
    await jobs.close()
