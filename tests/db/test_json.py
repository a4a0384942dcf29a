"""The JSON that reaches jsonb: serialised once per enqueue, never stale."""

from __future__ import annotations

import orjson

from drainpipe.db import dump_json, jsonb


def test_an_object_changed_between_two_checks_is_serialised_anew() -> None:
    payload = {"n": 1}
    assert dump_json(payload) == b'{"n":1}'
    payload["n"] = 2  # e.g. the first enqueue failed before it sent, and the caller retries
    assert dump_json(payload) == b'{"n":2}'
    assert orjson.loads(jsonb(payload).dumps(payload)) == {"n": 2}


def test_the_parameter_reuses_the_checked_bytes_of_the_same_object_only() -> None:
    payload = {"n": 1}
    checked = dump_json(payload)
    assert jsonb(payload).dumps(payload) is checked  # no second serialisation
    other = {"n": 1}
    assert jsonb(other).dumps(other) == checked and jsonb(other).dumps(other) is not checked
