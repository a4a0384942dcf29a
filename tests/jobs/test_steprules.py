"""The step rules both twins share (drainpipe.jobs.steprules), without a database: what a
queue's policy and keyring make of a step's result, a sleep and a wait, the budget rule's
arithmetic, and that a client without policies (the sync twin today) stores results in
clear with no limit. The round trips are tested in tests/jobs/test_steps.py and
tests/sync/test_steps_twin.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from drainpipe import DrainpipeError, Jobs, Keyring, QueuePolicy, sync
from drainpipe.jobs.steprules import StepRules, budget_low, check_event, step_names

DSN = "postgresql://nobody@127.0.0.1:1/none"  # never connected to: no call here reaches it
QUEUES: dict[str, Any] = {"flows": dict[str, Any], "other": dict[str, Any]}


def test_an_encrypted_queue_seals_step_results_and_opens_them() -> None:
    keyring = Keyring.parse(Keyring.new_entry("k1"))
    jobs = Jobs(DSN, QUEUES, policies={"flows": QueuePolicy(encrypt=True)}, keyring=keyring)
    rules = StepRules(jobs, "flows")
    stored, plain = rules._store({"card": "SECRET-4242"})
    assert plain == {"card": "SECRET-4242"}
    assert "SECRET-4242" not in repr(stored) and stored["$dp"] == 1
    assert rules.open_result(stored) == {"card": "SECRET-4242"}
    clear = StepRules(jobs, "other")  # a queue without the policy: in clear
    assert clear._store({"a": 1}) == ({"a": 1}, {"a": 1})


def test_a_policy_limits_results_sleeps_and_waits() -> None:
    policy = QueuePolicy(max_payload_bytes=64, max_delay=3600)
    rules = StepRules(Jobs(DSN, QUEUES, policies={"flows": policy}), "flows")
    with pytest.raises(DrainpipeError) as large:
        rules._store("x" * 100)
    assert large.value.code == "PAYLOAD_TOO_LARGE"
    assert rules._result_to_keep({"small": 1}) == {"small": 1}
    with pytest.raises(DrainpipeError) as kept_large:
        rules._result_to_keep("x" * 100)  # a handler's result over the limit fails too
    assert kept_large.value.code == "PAYLOAD_TOO_LARGE"
    assert rules._result_to_keep(object()) is None  # not JSON: not kept
    with pytest.raises(DrainpipeError) as far:
        rules._delay(timedelta(hours=2))
    assert far.value.code == "SCHEDULE_TOO_FAR"
    with pytest.raises(DrainpipeError) as far_wait:
        rules._wait_args("clicked", "k", timedelta(hours=2))
    assert far_wait.value.code == "SCHEDULE_TOO_FAR"
    assert rules._wait_args("clicked", "k", 60) == ("wait:clicked", 60.0)
    assert rules._delay(-5) == 0.0


def test_the_sync_twin_without_policies_stores_results_in_clear() -> None:
    with sync.Jobs(DSN, QUEUES) as jobs:
        rules = StepRules(jobs, "flows")
        assert rules._store("x" * 100_000)[0] == "x" * 100_000
        assert rules._delay(timedelta(days=400)) == 400 * 86400
        stored, wait, attempts = rules._spawn_args("other", [{"n": 1}], {"max_attempts": 3})
        assert (stored, wait, attempts) == ([{"n": 1}], 0.0, 3)
        with pytest.raises(TypeError):
            rules._spawn_args("other", [{}], {"dedupe_key": "k"})
        with pytest.raises(DrainpipeError) as unknown:
            rules._spawn_args("nope", [{}], {})
        assert unknown.value.kind == "invalid_request"


def test_the_budget_rule_and_the_names() -> None:
    assert budget_low(None, 100.0, 5.0) is False  # no budget: never low
    assert budget_low(104.0, 100.0, 5.0) is True
    assert budget_low(105.0, 100.0, 5.0) is False  # exactly the margin left: runs
    assert step_names("wait", "clicked") == "wait:clicked"
    assert step_names("sleep", "") == "sleep"
    with pytest.raises(DrainpipeError):
        check_event("e" * 201, "k")
    check_event("e", "")  # an empty key is a key
