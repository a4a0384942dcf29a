"""The agent inbox's lease ids (agents/statements.py): the same bytes as engine.core's, so lease
ids handed out before an upgrade still settle; altered, forged or foreign ones refused,
whether or not the codec remembers minting something like them; and the cheaper event-id
parser answering exactly as the regex it replaced."""

from __future__ import annotations

import os
import random
import re

from drainpipe.agents.statements import REMEMBERED, LeaseCodec, parse_event_id
from drainpipe.engine.core import mint_lease_id, read_lease_id

SECRET = b"lease-secret-of-the-tests-0123456789"


def test_lease_ids_are_engine_core_lease_ids_both_ways() -> None:
    codec = LeaseCodec(SECRET)
    for n in range(300):
        token, event_id = os.urandom(16), random.randrange(1, 2**63)
        minted = codec.mint(event_id, n, token)
        assert minted == mint_lease_id(SECRET, "lse", event_id, n, token)
        assert read_lease_id(SECRET, "lse", minted) == (event_id, n, token)
        # one minted elsewhere (another process, or before an upgrade): read by its MAC
        fresh = LeaseCodec(SECRET)
        assert fresh.read(mint_lease_id(SECRET, "lse", event_id, n, token)) == (event_id, n, token)


def test_altered_forged_and_foreign_lease_ids_are_refused() -> None:
    codec, token = LeaseCodec(SECRET), os.urandom(16)
    minted = codec.mint(42, 3, token)
    assert codec.read(minted) == (42, 3, token)
    for index in range(4, len(minted)):  # every character of the payload and its MAC
        for char in "AQg-_":
            altered = minted[:index] + char + minted[index + 1 :]
            if altered != minted:
                assert codec.read(altered) is None, (index, char)
    other_secret = mint_lease_id(b"another-secret-0123456789", "lse", 42, 3, token)
    assert codec.read(other_secret) is None
    assert LeaseCodec(b"another-secret-0123456789").read(minted) is None
    for junk in ("", "lse_", "job_" + minted[4:], minted + "A", minted[:-1], minted + "\n",
                 "lse_" + "é" * 59, None, 42, minted.encode()):  # fmt: skip
        assert codec.read(junk) is None, junk


def test_the_memory_of_minted_ids_is_bounded_and_only_holds_what_was_minted() -> None:
    codec = LeaseCodec(SECRET)
    first = codec.mint(1, 1, bytes(16))
    later = [codec.mint(n, 1, os.urandom(16)) for n in range(2, 3 * REMEMBERED)]
    # forgotten by now, still authentic: read through its MAC
    assert codec.read(first) == (1, 1, bytes(16))
    assert len(codec._minted) + len(codec._earlier) <= 2 * REMEMBERED
    assert codec.read(later[-1]) is not None
    assert codec.read(later[-1][:-2] + "AA") is None


def test_event_ids_parse_as_the_regex_did() -> None:
    old = re.compile(r"^evt_([1-9][0-9]{0,18})$")

    def by_regex(text: object) -> int | None:
        match = old.match(text) if isinstance(text, str) else None
        value = None if match is None else int(match.group(1))
        return value if value is not None and value <= 2**63 - 1 else None

    cases: list[object] = [
        "evt_1", "evt_0", "evt_01", "evt_", "evt_9223372036854775807", "evt_9223372036854775808",
        "evt_1\n", "evt_1\n\n", "evt_\u0661", "evt_+1", "evt_ 1", "EVT_1", None, 7, b"evt_1",
    ]  # fmt: skip
    rng = random.Random(17)
    cases += ["evt_" + "".join(rng.choice("0123456789\n a") for _ in range(rng.randint(0, 22)))
              for _ in range(20000)]  # fmt: skip
    for text in cases:
        assert parse_event_id(text) == by_regex(text), text


def test_one_text_per_lease_id() -> None:
    # the last character carries 2 unused bits: the three texts that differ from a lease
    # id only there decode to the same bytes and MAC, and are refused all the same
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for _ in range(20):
        token = os.urandom(16)
        minted = mint_lease_id(SECRET, "lse", 7, 1, token)
        for char in alphabet.replace(minted[-1], ""):
            twin = minted[:-1] + char
            assert LeaseCodec(SECRET).read(twin) is None, twin
            assert read_lease_id(SECRET, "lse", twin) is None, twin
        assert LeaseCodec(SECRET).read(minted) == (7, 1, token)
