"""Keyring: parsing, sealing bound to the queue, rotation, dedupe hashes, `keys new`."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from drainpipe import Keyring
from drainpipe.keyring import UnreadableCiphertext

K1 = Keyring.new_entry("k1")
K2 = Keyring.new_entry("k2")


def test_from_env_reads_kid_key_entries_first_encrypts() -> None:
    ring = Keyring.from_env({"DRAINPIPE_PAYLOAD_KEYS": f" {K2} , {K1} "})
    assert ring.key_ids == ["k2", "k1"]
    assert ring.primary == "k2"
    assert ring.seal("emails", b"x").startswith("k2:")
    other = Keyring.from_env({"MY_KEYS": K1}, name="MY_KEYS")
    assert other.key_ids == ["k1"]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "k1",
        "k1:",
        ":abc",
        "k1:not base64!!",
        "k1:" + base64.urlsafe_b64encode(b"short").decode(),
        f"{K1},{K1}",
        "bad id:" + K1.split(":")[1],
        f"{K1},",
    ],
    # K1 is a new random key in each process: ids without it keep the test ids the same in
    # every pytest-xdist worker (which must collect the same tests)
    ids=lambda value: value.replace(K1, "K1").replace(K1.split(":")[1], "<key>"),
)
def test_empty_or_malformed_key_lists_are_value_errors(value: str) -> None:
    with pytest.raises(ValueError, match=r"payload key|empty|is not set") as caught:
        Keyring.from_env({"DRAINPIPE_PAYLOAD_KEYS": value})
    # the message never carries key material
    assert K1.split(":")[1] not in str(caught.value)


def test_missing_variable_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="DRAINPIPE_PAYLOAD_KEYS"):
        Keyring.from_env({})


def test_sealed_value_is_bound_to_its_queue_and_detects_tampering() -> None:
    ring = Keyring.parse(K1)
    sealed = ring.seal("emails", b'{"to":"secret@example.com"}')
    assert b"secret" not in sealed.encode()
    assert ring.open("emails", sealed) == b'{"to":"secret@example.com"}'
    with pytest.raises(UnreadableCiphertext):
        ring.open("reports", sealed)
    kid, body = sealed.split(":")
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-1] ^= 1
    tampered = kid + ":" + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(UnreadableCiphertext):
        ring.open("emails", tampered)
    with pytest.raises(UnreadableCiphertext, match="no key"):
        ring.open("emails", "k9:" + body)
    with pytest.raises(UnreadableCiphertext):
        ring.open("emails", 42)


def test_rotation_old_keys_still_decrypt_and_the_repr_shows_ids_only() -> None:
    old = Keyring.parse(K1)
    sealed = old.seal("emails", b"payload")
    rotated = Keyring.parse(f"{K2},{K1}")
    assert rotated.open("emails", sealed) == b"payload"
    assert not rotated.sealed_with_primary(sealed)
    assert rotated.sealed_with_primary(rotated.seal("emails", b"payload"))
    assert repr(rotated) == "Keyring(key_ids=['k2', 'k1'])"
    assert K2.split(":")[1] not in repr(rotated)


def test_dedupe_hashes_survive_prepending_a_key_and_differ_per_queue() -> None:
    before = Keyring.parse(K1).dedupe_hash("emails", "digest:alice@example.com")
    after = Keyring.parse(f"{K2},{K1}").dedupe_hash("emails", "digest:alice@example.com")
    assert before == after
    assert before.startswith("h1:") and "alice" not in before and len(before) <= 255
    assert Keyring.parse(K1).dedupe_hash("reports", "digest:alice@example.com") != before
    assert Keyring.parse(K2).dedupe_hash("emails", "digest:alice@example.com") != before


def test_keys_new_prints_a_parseable_entry() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "drainpipe.cli", "keys", "new", "--kid", "prod1"],
        capture_output=True,
        text=True,
        check=True,
    )
    entry = done.stdout.strip()
    assert entry.startswith("prod1:")
    assert Keyring.parse(entry).key_ids == ["prod1"]
    bad = subprocess.run(
        [sys.executable, "-m", "drainpipe.cli", "keys", "new", "--kid", "no way"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
