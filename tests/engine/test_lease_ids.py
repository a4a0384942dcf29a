"""The pure lease-id and long-poll arithmetic of ``engine/core.py``."""

from __future__ import annotations

import os

from drainpipe.agents.statements import long_poll_wait, poll_backoff
from drainpipe.engine.core import mint_lease_id, read_lease_id

SECRET = b"k" * 32


def test_a_lease_id_reads_back_only_with_its_secret_and_prefix() -> None:
    token = os.urandom(16)
    lease_id = mint_lease_id(SECRET, "lse", 42, 3, token)
    assert lease_id.startswith("lse_") and len(lease_id) < 100
    assert read_lease_id(SECRET, "lse", lease_id) == (42, 3, token)
    assert read_lease_id(b"x" * 32, "lse", lease_id) is None
    assert read_lease_id(SECRET, "job", "job_" + lease_id[4:]) is None


def test_any_change_to_a_lease_id_is_refused() -> None:
    lease_id = mint_lease_id(SECRET, "lse", 2**62, 1, bytes(16))
    for index in range(4, len(lease_id)):
        swapped = "A" if lease_id[index] != "A" else "B"
        altered = lease_id[:index] + swapped + lease_id[index + 1 :]
        assert read_lease_id(SECRET, "lse", altered) is None, index
    for junk in ("", "lse_", "lse_!!!", "lse_" + "A" * 200, lease_id + "A"):
        assert read_lease_id(SECRET, "lse", junk) is None


def test_long_poll_waits_and_steps() -> None:
    assert long_poll_wait(30, 25, 1) == 24
    assert long_poll_wait(5, 25, 1) == 5
    assert long_poll_wait(60, 100, 1) == 30
    assert long_poll_wait(10, 0.5, 1) == 0
    assert [poll_backoff(step) for step in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
