"""Signed cursors: a cursor opens only for the route, filters, actor and target it was made
for, and any edit of it fails; every failure is the same 400 CURSOR_INVALID."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainpipe.console.cursors import CURSOR_INVALID, CursorSigner
from drainpipe.errors import DrainpipeError

SECRET = "cursor-secret-for-tests-0123456789"
FILTERS = {"queue": "emails", "state": "dead", "tenant": None}


def refused(call: object) -> DrainpipeError:
    with pytest.raises(DrainpipeError) as caught:
        call()  # type: ignore[operator]
    assert (caught.value.kind, caught.value.status, caught.value.code) == (
        "invalid_request",
        400,
        CURSOR_INVALID,
    )
    return caught.value


def test_a_cursor_opens_where_it_was_made() -> None:
    signer = CursorSigner(SECRET, "production")
    cursor = signer.sign("jobs", FILTERS, "ops@example.com", "1764590000.123456:42")
    assert signer.open(cursor, "jobs", dict(FILTERS), "ops@example.com") == "1764590000.123456:42"
    assert "ops@example.com" not in cursor and "emails" not in cursor


@pytest.mark.parametrize(
    ("route", "filters", "actor"),
    [
        ("audit", FILTERS, "ops@example.com"),
        ("jobs", {**FILTERS, "queue": "reports"}, "ops@example.com"),
        ("jobs", {**FILTERS, "state": None}, "ops@example.com"),
        ("jobs", {**FILTERS, "tenant": "acme"}, "ops@example.com"),
        ("jobs", FILTERS, "intern@example.com"),
    ],
)
def test_another_route_filter_or_actor_is_refused(
    route: str, filters: dict[str, str | None], actor: str
) -> None:
    signer = CursorSigner(SECRET, "production")
    cursor = signer.sign("jobs", FILTERS, "ops@example.com", "position")
    refused(lambda: signer.open(cursor, route, filters, actor))


def test_another_target_or_secret_is_refused() -> None:
    cursor = CursorSigner(SECRET, "production").sign("jobs", FILTERS, "ops", "p")
    refused(lambda: CursorSigner(SECRET, "staging").open(cursor, "jobs", FILTERS, "ops"))
    other = CursorSigner(SECRET + "x", "production")
    refused(lambda: other.open(cursor, "jobs", FILTERS, "ops"))


@given(st.integers(min_value=0), st.characters(codec="ascii", exclude_characters="\x00"))
def test_any_single_character_edit_is_refused(index: int, replacement: str) -> None:
    signer = CursorSigner(SECRET, "production")
    cursor = signer.sign("jobs", FILTERS, "ops", "1764590000.5:99")
    at = index % len(cursor)
    edited = cursor[:at] + replacement + cursor[at + 1 :]
    if edited == cursor:
        return
    refused(lambda: signer.open(edited, "jobs", FILTERS, "ops"))


def test_every_last_character_edit_is_refused() -> None:
    # the tag's last base64 character has spare bits: other spellings must not pass
    signer = CursorSigner(SECRET, "production")
    cursor = signer.sign("jobs", FILTERS, "ops", "p")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for char in alphabet:
        if char != cursor[-1]:
            refused(lambda char=char: signer.open(cursor[:-1] + char, "jobs", FILTERS, "ops"))


@pytest.mark.parametrize(
    "cursor", ["", ".", "abc", "abc.", ".abc", "a.b.c", "é.é", "x" * 600, "%%%.$$$"]
)
def test_garbage_is_refused(cursor: str) -> None:
    refused(lambda: CursorSigner(SECRET, "production").open(cursor, "jobs", FILTERS, "ops"))


def test_a_filter_value_cannot_pose_as_a_separator() -> None:
    signer = CursorSigner(SECRET, "production")
    cursor = signer.sign("jobs", {"queue": "a", "state": "b,c"}, "ops", "p")
    refused(lambda: signer.open(cursor, "jobs", {"queue": "a,b", "state": "c"}, "ops"))


def test_weak_secrets_and_empty_targets_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        CursorSigner("short", "production")
    with pytest.raises(ValueError, match="target"):
        CursorSigner(SECRET, " ")
