"""Bad input at every edge: a clear 4xx / ``validation``, never a 500, a raw Python error or
a silently changed payload (issue 19, items 2-4). Limits: docs/limits.md."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import drainpipe
from drainpipe import DrainpipeError, Idempotency, Jobs, WebhookInbox
from drainpipe.db import dump_json
from drainpipe.schedules.cron import zone
from drainpipe.validation import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES
from tests.conftest import connect
from tests.inbox.test_inbox import SECRET, count, make_request, rows, signed

ANY = dict[str, Any]


@pytest.fixture
async def jobs_conn(jobs_db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit connection to a database on each jobs backend in turn."""
    connection = await connect(jobs_db_url)
    yield connection
    await connection.close()


async def refusal(call: Callable[[], Awaitable[Any]]) -> DrainpipeError | None:
    """The DrainpipeError ``call`` raised, or None when it succeeded."""
    try:
        await call()
    except DrainpipeError as exc:
        return exc
    return None


QUEUES = {"work": ANY, "items": list[Any]}
HYPOTHESIS = settings(
    derandomize=True,
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


# -- item 3: payloads JSON cannot carry exactly ---------------------------------------------


async def test_big_floats_come_back_as_floats_and_long_ints_keep_every_digit(
    jobs_conn: psycopg.AsyncConnection[Any],
) -> None:
    payload = {
        "e16": 1e16,
        "negative": -1.5e300,
        "largest": 1.7976931348623157e308,
        "small": 1e-7,
        "tenth": 0.1,
        "whole": 2.0,
        "int": 10**16,
        "long": 12345678901234567890123456789,
        "nested": [{"x": 3e20}],
    }
    jobs = Jobs(jobs_conn, QUEUES)
    await jobs.enqueue("work", payload)
    [job] = await jobs.claim("work")
    assert job.payload == payload
    for key in ("e16", "negative", "largest", "small", "tenth", "whole"):
        assert type(job.payload[key]) is float, key
    assert type(job.payload["nested"][0]["x"]) is float
    assert type(job.payload["int"]) is int and type(job.payload["long"]) is int


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"a": float("nan")}, ["payload", "a"]),
        ({"a": [1, float("inf")]}, ["payload", "a", 1]),
        ({"a": {"b": -math.inf}}, ["payload", "a", "b"]),
        ({"\ud800": 1}, ["payload", "\ud800"]),
        ({"a": "x\ud800y"}, ["payload", "a"]),
        ({"a": "nul\x00"}, ["payload", "a"]),
        ({"a": None, "b": [None, float("nan")]}, ["payload", "b", 1]),
    ],
)
async def test_values_json_cannot_carry_are_refused_naming_the_path(
    conn: psycopg.AsyncConnection[Any], payload: Any, path: list[Any]
) -> None:
    jobs = Jobs(conn, QUEUES)
    with pytest.raises(DrainpipeError) as caught:
        await jobs.enqueue("work", payload)
    assert caught.value.kind == "validation"
    assert caught.value.issues is not None and caught.value.issues[0]["path"] == path
    assert await jobs.claim("work") == []  # nothing stored, nothing changed


async def test_nesting_beyond_the_limit_is_refused_and_at_the_limit_stored(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    jobs = Jobs(conn, QUEUES)
    for depth in (MAX_JSON_DEPTH + 1, 990, 5000):
        with pytest.raises(DrainpipeError) as caught:
            await jobs.enqueue("items", nested(depth))
        assert caught.value.kind == "validation", depth
    await jobs.enqueue("items", nested(MAX_JSON_DEPTH))
    [job] = await jobs.claim("items")
    assert job.payload == nested(MAX_JSON_DEPTH)


async def test_payload_over_the_limit_is_refused_before_anything_is_sent(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    jobs = Jobs(conn, QUEUES)
    started = time.perf_counter()
    with pytest.raises(DrainpipeError) as caught:
        await jobs.enqueue("work", {"blob": "x" * (MAX_PAYLOAD_BYTES + 1)})
    assert caught.value.kind == "validation" and caught.value.code == "PAYLOAD_TOO_LARGE"
    with pytest.raises(DrainpipeError) as many:
        await jobs.enqueue_many("work", [{"ok": 1}, {"blob": "x" * (MAX_PAYLOAD_BYTES + 1)}])
    assert many.value.code == "PAYLOAD_TOO_LARGE"
    assert many.value.issues is not None and many.value.issues[0]["path"][0] == 1
    assert time.perf_counter() - started < 5
    assert await jobs.claim("work", batch=5) == []
    # just under the limit is stored whole
    blob = "y" * (MAX_PAYLOAD_BYTES - 20)
    await jobs.enqueue("work", {"blob": blob})
    [job] = await jobs.claim("work")
    assert job.payload == {"blob": blob}


def test_the_fast_serialisation_keeps_plain_payloads_on_the_fast_path() -> None:
    # the checks are substring searches on orjson's bytes (and a float-only walk when there
    # is a null): the output is orjson's own, byte for byte
    import orjson

    for value in ({"a": 1, "b": "e+x"}, {"a": None, "b": [1.5, None]}, [1, 2.5, "null"]):
        assert dump_json(value) == orjson.dumps(value)
    assert dump_json({"a": 1e16}) == b'{"a":10000000000000000.0}'


# -- item 4: wrong error types ---------------------------------------------------------------


def test_queue_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="Queue"):
        Jobs("postgresql://127.0.0.1:1/none", {"q\n": ANY})


async def test_a_job_with_out_of_range_id_or_attempts_is_a_validation_error(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    jobs = Jobs(conn, QUEUES)
    await jobs.enqueue("work", {"n": 1})
    [job] = await jobs.claim("work")
    for bad in (dataclasses.replace(job, id=2**63), dataclasses.replace(job, attempts=2**31)):
        for call in (jobs.complete(bad), jobs.fail(bad, "x"), jobs.extend(bad, 10)):
            with pytest.raises(DrainpipeError) as caught:
                await call
            assert caught.value.kind == "validation"
    assert await jobs.complete(job) is True  # the real one is untouched


@pytest.mark.parametrize(
    ("context", "path"),
    [
        ({"tenat": "acme"}, ["context", "tenat"]),
        ({"tenant": "acme", "actor": {"id": "u1", "knd": "user"}}, ["context", "actor", "knd"]),
        ({"tenant": "t" * 3000}, ["context", "tenant"]),
        ({"tenant": "a\ud800"}, ["context", "tenant"]),
        ({"actor": {"id": "u" * 3000}}, ["context", "actor", "id"]),
    ],
)
async def test_bad_context_is_refused(
    conn: psycopg.AsyncConnection[Any], context: Any, path: list[Any]
) -> None:
    jobs = Jobs(conn, QUEUES)
    with pytest.raises(DrainpipeError) as caught:
        await jobs.enqueue("work", {"n": 1}, context=context)
    assert caught.value.kind == "validation"
    assert caught.value.issues is not None and caught.value.issues[0]["path"] == path


@pytest.mark.parametrize("name", ["localtime", "posixrules", "LOCALTIME", "posix/localtime"])
def test_host_dependent_time_zones_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="Unknown time zone"):
        zone(name)
    with pytest.raises(ValueError, match="Unknown time zone"):
        drainpipe.next_cron_run("0 9 * * *", name)


async def test_schedule_names_prefixes_and_tenants_are_bounded(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    jobs = Jobs(conn, QUEUES)
    calls = [
        jobs.schedule("\ud800", "@daily", "work", {}),
        jobs.schedule("n", "@daily", "work", {}, tenant="t" * 3000),
        jobs.schedule("n", "@daily", "work", {}, tenant="\udfff"),
        jobs.schedule("n", "@daily", "work", {}, time_zone="localtime"),
        jobs.schedule("n", "@daily", "work", {"x": float("nan")}),
        jobs.unschedule("a\ud800"),
        jobs.unschedule("n" * 3000),
        jobs.list_schedules(prefix="\ud800"),
        jobs.list_schedules(tenant="t" * 3000),
        jobs.unschedule_all(tenant="\ud800"),
    ]
    for call in calls:
        with pytest.raises(DrainpipeError) as caught:
            await call
        assert caught.value.kind == "validation"
    assert await jobs.list_schedules() == []


async def test_lease_keys_and_scopes_are_bounded(conn: psycopg.AsyncConnection[Any]) -> None:
    for key, scope in (("\ud800", ""), ("k", "s" * 3000), ("k", "\udc00"), ("k" * 3000, "")):
        with pytest.raises(DrainpipeError) as caught:
            async with drainpipe.lease(conn, key, 5, scope=scope):
                pass
        assert caught.value.kind == "invalid_request"
    async with drainpipe.lease(conn, "k" * 255, 5, scope="s" * 255) as held:
        assert held is not None


async def test_idempotency_keys_and_scopes_are_bounded(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    idem = Idempotency(conn)
    with pytest.raises(DrainpipeError) as key_error:
        await idem.begin("\ud800", "fp")
    assert key_error.value.code == "IDEMPOTENCY_KEY_INVALID"
    for scope in ("s" * 3000, "\ud800"):
        with pytest.raises(DrainpipeError) as scope_error:
            await idem.begin("k", "fp", scope)
        assert scope_error.value.code == "IDEMPOTENCY_SCOPE_INVALID"
        assert scope_error.value.status == 400
    assert (await idem.begin("k", "fp", "s" * 255)).state == "started"


async def test_a_scope_built_from_the_request_too_long_is_a_400_problem(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    from drainpipe.http import Headers, Request, Response

    idem = Idempotency(conn, scope=lambda request: "tenant:" + request.headers["x-tenant"])
    ran: list[int] = []

    async def handler() -> Response:
        ran.append(1)
        return Response(201, b"{}")

    async def body() -> Any:
        yield b"{}"

    request = Request(
        "POST", "/orders", Headers({"idempotency-key": "k1", "x-tenant": "t" * 3000}), body
    )
    response = await idem.handle(request, handler)
    assert response.status == 400 and ran == []
    assert json.loads(response.body)["code"] == "IDEMPOTENCY_SCOPE_INVALID"


# -- item 2: the webhook inbox ---------------------------------------------------------------


async def _deliver(inbox: WebhookInbox, body: bytes, msg_id: str = "msg_1") -> Any:
    return await inbox.receive(make_request(body, signed(body, msg_id)))


async def test_a_signed_webhook_with_a_huge_id_is_a_400_not_a_500(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    inbox = WebhookInbox(conn, source="billing", secrets=SECRET)
    response = await _deliver(inbox, b'{"type": "x"}', "m" * 3000)
    assert response.status == 400
    assert json.loads(response.body)["code"] == "WEBHOOK_INVALID_ID"
    assert await count(conn) == 0
    assert (await _deliver(inbox, b'{"type": "x"}', "m" * 255)).status == 202


@pytest.mark.parametrize(
    "body",
    [
        b'{"note": "a\\u0000b"}',
        b'{"note": "\\ud800"}',
        b'{"\\udfff": 1}',
        b"[" * 300 + b"]" * 300,
    ],
)
async def test_a_verified_payload_jsonb_cannot_hold_is_a_400_with_a_webhook_code(
    db_url: str, conn: psycopg.AsyncConnection[Any], body: bytes
) -> None:
    inbox = WebhookInbox(conn, source="billing", secrets=SECRET)
    response = await _deliver(inbox, body)
    assert response.status == 400
    assert json.loads(response.body)["code"] == "WEBHOOK_INVALID_PAYLOAD"
    assert await count(conn) == 0


async def test_json_nested_past_the_recursion_limit_is_a_400(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    inbox = WebhookInbox(conn, source="billing", secrets=SECRET)
    response = await _deliver(inbox, b"[" * 100_000 + b"]" * 100_000)
    assert response.status == 400
    assert json.loads(response.body)["code"].startswith("WEBHOOK_")


async def test_a_tenant_from_the_payload_too_long_is_a_400(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    inbox = WebhookInbox(
        conn, source="billing", secrets=SECRET, tenant_of=lambda payload: payload["org"]
    )
    response = await _deliver(inbox, json.dumps({"org": "o" * 3000}).encode())
    assert response.status == 400
    assert json.loads(response.body)["code"] == "WEBHOOK_INVALID_TENANT"
    assert await count(conn) == 0


async def test_webhook_numbers_are_stored_as_python_parsed_them(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    inbox = WebhookInbox(conn, source="billing", secrets=SECRET)
    body = b'{"amount": 1e16, "count": 123456789012345678901234567890, "ratio": 0.5}'
    assert (await _deliver(inbox, body)).status == 202
    [row] = await rows(conn)
    assert row["payload"] == json.loads(body)
    assert type(row["payload"]["amount"]) is float


async def test_inbox_sources_ids_and_tenants_are_bounded(
    db_url: str, conn: psycopg.AsyncConnection[Any]
) -> None:
    with pytest.raises(ValueError, match="source"):
        WebhookInbox(db_url, source="s" * 3000)
    with pytest.raises(ValueError, match="source"):
        WebhookInbox(db_url, source="\ud800")
    inbox = WebhookInbox(conn, source="billing")
    for kwargs in (
        {"id": "i" * 3000},
        {"id": "\ud800"},
        {"id": "ok", "tenant": "t" * 3000},
        {"id": "ok", "type": "\udfff"},
        {"id": "ok", "payload": {"x": float("nan")}},
        {"id": "ok", "headers": {"h": "\ud800"}},
    ):
        arguments: dict[str, Any] = {"payload": {}, **kwargs}
        with pytest.raises(DrainpipeError) as caught:
            await inbox.store(**arguments)
        assert caught.value.kind == "validation", kwargs
    assert await count(conn) == 0


# -- hypothesis: every public call answers bad text with a DrainpipeError ------------------

TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1),
    st.builds(lambda n: "x" * n, st.integers(min_value=250, max_value=3000)),
    st.just("a\x00b"),
)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@HYPOTHESIS
@given(text=TEXT)
def test_every_text_input_is_accepted_or_refused_with_a_drainpipe_error(
    db_url: str, text: str
) -> None:
    async def attempt() -> None:
        connection = await connect(db_url)
        jobs = Jobs(connection, QUEUES)
        inbox = WebhookInbox(connection, source="billing")
        idem = Idempotency(connection)
        calls = [
            lambda: jobs.enqueue("work", {"t": text}, dedupe_key=text),
            lambda: jobs.enqueue("work", {text: 1}, context={"tenant": text}),
            lambda: jobs.schedule(text, "@daily", "work", {}, tenant=text or None),
            lambda: jobs.unschedule(text),
            lambda: jobs.list_schedules(prefix=text, tenant=text),
            lambda: jobs.unschedule_all(tenant=text),
            lambda: drainpipe.with_lease(connection, text, _noop, seconds=5, scope=text),
            lambda: idem.begin(text, "fp", text),
            lambda: inbox.store(id=text, payload={"t": text}, tenant=text, type=text),
        ]
        try:
            for call in calls:
                error = await refusal(call)
                assert error is None or 400 <= error.status < 500, error
        finally:
            await connection.close()

    _run(attempt())


async def _noop(lease: Any) -> None:
    return None


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5)
    | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


@HYPOTHESIS
@given(value=JSON_VALUES)
def test_a_payload_comes_back_exactly_or_is_refused(db_url: str, value: Any) -> None:
    async def attempt() -> None:
        connection = await connect(db_url)
        try:
            jobs = Jobs(connection, QUEUES)
            error = await refusal(lambda: jobs.enqueue("work", {"v": value}))
            if error is not None:
                assert error.kind == "validation" and error.issues, error
                return
            [job] = await jobs.claim("work")
            assert await jobs.complete(job)
            assert _same(job.payload["v"], value), (job.payload["v"], value)
        finally:
            await connection.close()

    _run(attempt())


def _same(left: Any, right: Any) -> bool:
    """Equal, and of the same JSON type all the way down (a float is not an int)."""
    if type(left) is not type(right):
        return isinstance(left, list) and isinstance(right, tuple) and _same(left, list(right))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    return bool(left == right)


def test_operator_set_names_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="scope"):
        Idempotency("postgresql://127.0.0.1:1/none", scope="s" * 3000)
    with pytest.raises(ValueError, match="worker"):
        WebhookInbox("postgresql://127.0.0.1:1/none", source="billing", worker="w" * 3000)
