"""The Lambda and Cloud Run functions entries, invoked the way each platform invokes them,
with real Postgres behind the apps: API Gateway v2 and function URL events and scheduler
events through mangum; Flask requests through functions-framework's own app and client."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

import drainpipe
from drainpipe.aws import LambdaHandler, lambda_handler, scheduled_handler
from drainpipe.db import Database
from drainpipe.gcp import asgi_handler
from drainpipe.models import QueueStats
from tests.conftest import ROOT
from tests.inbox.test_inbox import SECRET as WEBHOOK_SECRET
from tests.inbox.test_inbox import signed

CRON_SECRET = "platform-cron-secret-0123456789abcdef0123456789abcdef"
CLOSED_PORT_DSN = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"


class Email(TypedDict):
    to: str
    subject: str


def email(n: int) -> Email:
    return {"to": f"user{n}@example.com", "subject": f"hello {n}"}


class Context:
    """The one method of Lambda's context object the entries read."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def http_v2_event(
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    function_url: bool = False,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event, or a Lambda function URL's (the same
    format, a lambda-url domain, no stage of its own)."""
    domain = (
        "abcdefghij.lambda-url.eu-west-1.on.aws"
        if function_url
        else "api1234.execute-api.eu-west-1.amazonaws.com"
    )
    encoded = bool(body) and function_url  # function URLs base64 encode binary-ish bodies
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"host": domain, "user-agent": "test", **(headers or {})},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abcdefghij" if function_url else "api1234",
            "domainName": domain,
            "domainPrefix": domain.split(".")[0],
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.9",
                "userAgent": "test",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Dec/2026:09:00:00 +0000",
            "timeEpoch": 1796115600000,
        },
        "body": base64.b64encode(body).decode() if encoded else body.decode(),
        "isBase64Encoded": encoded,
    }


def load_module(path: Path, name: str) -> ModuleType:
    """Import an example file by path, fresh (its lazily built objects start empty)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def enqueue(db_url: str, count: int) -> list[int]:
    async with drainpipe.Jobs(db_url, {"emails": Email}) as jobs:
        return [await jobs.enqueue("emails", email(n)) for n in range(count)]


async def stats(db_url: str) -> QueueStats:
    async with drainpipe.Jobs(db_url, {"emails": Email}) as jobs:
        return (await jobs.stats(["emails"]))["emails"]


def ready(db_url: str) -> int:
    return asyncio.run(stats(db_url)).ready


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.seen: list[str] = []
        self.delay = delay

    async def __call__(self, payload: Email, job: Any) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.seen.append(payload["to"])


def route_on(db_url: str, recorder: Recorder, **options: Any) -> tuple[Any, Database]:
    database = Database(db_url)
    jobs = drainpipe.Jobs(database, {"emails": Email})
    route = jobs.drain_route(secret=CRON_SECRET, handlers={"emails": recorder}, **options)
    return route, database


# -- AWS Lambda ------------------------------------------------------------------------


def test_api_gateway_v2_event_runs_the_drain_route(db_url: str) -> None:
    asyncio.run(enqueue(db_url, 2))
    recorder = Recorder()
    route, database = route_on(db_url, recorder)
    handler = lambda_handler(route)
    try:
        denied = handler(http_v2_event("/drain"), Context(30_000))
        assert denied["statusCode"] == 401
        assert denied["headers"]["content-type"] == "application/problem+json"
        assert "www-authenticate" in denied["headers"]
        assert ready(db_url) == 2 and recorder.seen == []  # a stranger changed nothing

        authorized = {"authorization": f"Bearer {CRON_SECRET}"}
        answer = handler(http_v2_event("/drain", headers=authorized), Context(30_000))
        assert answer["statusCode"] == 200, answer
        report = json.loads(answer["body"])
        assert report["queues"] == {"emails": {"succeeded": 2, "failed": 0}}
        assert sorted(recorder.seen) == ["user0@example.com", "user1@example.com"]
        # a second (warm) invocation reuses the process's loop and pool
        asyncio.run(enqueue(db_url, 1))
        again = handler(http_v2_event("/drain", headers=authorized, method="POST"), None)
        assert json.loads(again["body"])["queues"]["emails"]["succeeded"] == 1
        assert ready(db_url) == 0
    finally:
        handler.run_in_loop(database.close())
        handler.close()


def test_function_url_event_serves_an_idempotent_post(db_url: str) -> None:
    calls: list[bytes] = []

    async def create(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        calls.append(message["body"])
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"id": %d}' % len(calls)})

    idempotency = drainpipe.Idempotency(db_url, required=True, anonymous=True)
    handler = lambda_handler(idempotency.wrap(create))
    body = json.dumps({"item": "book"}).encode()
    headers = {"idempotency-key": "order-1", "content-type": "application/json"}
    try:
        event = http_v2_event(
            "/orders", method="POST", headers=headers, body=body, function_url=True
        )
        assert event["isBase64Encoded"] is True
        first = handler(event, Context(10_000))
        second = handler(event, Context(10_000))
        assert (first["statusCode"], second["statusCode"]) == (201, 201)
        assert json.loads(first["body"]) == json.loads(second["body"]) == {"id": 1}
        assert second["headers"].get("idempotency-replayed") == "true"
        assert calls == [body]  # the app ran once, and got the decoded body
        missing = handler(
            http_v2_event("/orders", method="POST", body=body, function_url=True), None
        )
        assert missing["statusCode"] == 400
        assert json.loads(missing["body"])["code"] == "IDEMPOTENCY_KEY_MISSING"
    finally:
        handler.run_in_loop(idempotency.db.close())
        handler.close()


@pytest.fixture
def aws_example(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("CRON_SECRET", CRON_SECRET)
    monkeypatch.setenv("WEBHOOK_SECRET", WEBHOOK_SECRET)
    module = load_module(ROOT / "examples/aws-lambda/handler.py", "aws_example_handler")
    yield module
    if module._built is not None:
        module.handler.run_in_loop(module._built[0].jobs.backend.db.close())
        module.handler.close()
    sys.modules.pop("aws_example_handler", None)


def test_the_lambda_example_stores_webhooks_and_drains_on_schedule(
    aws_example: ModuleType, db_url: str
) -> None:
    handler: LambdaHandler = aws_example.handler
    body = json.dumps({"type": "invoice.paid", "data": {"id": "in_1"}})
    headers = signed(body, "msg_lambda_1")
    event = http_v2_event(
        "/webhooks/billing", method="POST", headers=headers, body=body.encode(), function_url=True
    )
    stored = handler(event, Context(30_000))
    assert stored["statusCode"] == 202, stored
    assert json.loads(stored["body"])["duplicate"] is False
    again = handler(event, Context(30_000))
    assert again["statusCode"] == 200 and json.loads(again["body"])["duplicate"] is True
    forged = dict(headers, **{"webhook-signature": "v1,AAAA"})
    refused = handler(
        http_v2_event(
            "/webhooks/billing",
            method="POST",
            headers=forged,
            body=body.encode(),
            function_url=True,
        ),
        None,
    )
    assert refused["statusCode"] == 401
    assert handler(http_v2_event("/nothing"), None)["statusCode"] == 404

    asyncio.run(enqueue(db_url, 1))
    # EventBridge Scheduler's input: no HTTP and no secret (IAM allowed the invoke)
    report = handler({"drainpipe": "drain"}, Context(20_000))
    assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert report["inboxes"] == {"billing": {"succeeded": 1, "failed": 0}}
    assert report["errors"] == 0 and ready(db_url) == 0
    # an EventBridge rule's scheduled event is accepted too
    rule_event = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
    assert handler(rule_event, Context(20_000))["queues"]["emails"]["succeeded"] == 0


def test_a_scheduled_drain_takes_its_budget_from_the_remaining_time(db_url: str) -> None:
    asyncio.run(enqueue(db_url, 6))
    recorder = Recorder(delay=0.25)
    route, database = route_on(db_url, recorder, budget=600)  # the route's own budget is not used
    handler = scheduled_handler(route, reserve=10.0)
    try:
        assert handler.scheduled is not None
        assert handler.scheduled.budget(Context(10_600)) == pytest.approx(0.6)
        started = time.monotonic()
        report = handler({"drainpipe": "drain"}, Context(10_600))
        took = time.monotonic() - started
        # claims stop at 0.6 s; the job claimed before that finishes
        assert 1 <= report["queues"]["emails"]["succeeded"] <= 4, report
        assert report["budgetExhausted"] is True and report["more"] is True
        assert took < 2.0
        assert ready(db_url) == 6 - len(recorder.seen)
        assert route.budget == 600  # the configured route is unchanged
    finally:
        handler.run_in_loop(database.close())
        handler.close()


def test_a_scheduled_drain_without_time_left_fails_the_invocation(db_url: str) -> None:
    asyncio.run(enqueue(db_url, 1))
    route, database = route_on(db_url, Recorder())
    handler = scheduled_handler(route, reserve=10.0)
    try:
        with pytest.raises(drainpipe.DrainpipeError, match="reserve") as raised:
            handler({"drainpipe": "drain"}, Context(9_000))
        assert raised.value.kind == "timeout"
        assert ready(db_url) == 1  # nothing was claimed
    finally:
        handler.run_in_loop(database.close())
        handler.close()


def test_a_scheduled_drain_that_cannot_reach_the_database_raises() -> None:
    database = Database(CLOSED_PORT_DSN, timeout=0.5)
    jobs = drainpipe.Jobs(database, {"emails": Email})
    seen: list[BaseException] = []
    route = jobs.drain_route(secret=CRON_SECRET, handlers={}, on_error=lambda e, j: seen.append(e))
    handler = scheduled_handler(route)
    try:
        with pytest.raises(drainpipe.DrainpipeError, match="cannot be reached") as raised:
            handler({"drainpipe": "drain"}, Context(30_000))
        assert raised.value.kind == "network" and raised.value.status == 503
        assert isinstance(raised.value.__cause__, drainpipe.DrainpipeError)
        assert len(seen) == 1  # the route's own on_error still hears of it
    finally:
        handler.run_in_loop(database.close())
        handler.close()


def test_events_the_handler_does_not_know_are_refused_loudly(db_url: str) -> None:
    route, database = route_on(db_url, Recorder())
    http_only = lambda_handler(route)
    schedule_only = scheduled_handler(route)
    try:
        for event in ({}, {"Records": []}, {"drainpipe": "other"}, [], "drain"):
            with pytest.raises(ValueError, match="not an HTTP event"):
                http_only(event, None)
        with pytest.raises(ValueError, match="no drain route"):
            http_only({"drainpipe": "drain"}, None)
        with pytest.raises(ValueError, match="serves no HTTP app"):
            schedule_only(http_v2_event("/drain"), None)
        with pytest.raises(ValueError, match="reserve"):
            scheduled_handler(route, reserve=-1)
        with pytest.raises(ValueError, match="needs an ASGI app"):
            lambda_handler(None)
    finally:
        http_only.run_in_loop(database.close())
        http_only.close()
        schedule_only.close()


# -- Google Cloud (functions-framework) ------------------------------------------------


@pytest.fixture
def gcp_example(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """functions-framework's own app for the example's ``drain`` function."""
    import functions_framework

    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("CRON_SECRET", CRON_SECRET)
    monkeypatch.setenv("WEBHOOK_SECRET", WEBHOOK_SECRET)
    source = str(ROOT / "examples/gcp/main.py")
    apps = {
        target: functions_framework.create_app(target=target, source=source)
        for target in ("drain", "billing_webhook")
    }
    yield apps
    module = sys.modules.pop("main", None)
    if module is not None and module._built is not None:
        module.serve_drain._loop.run(module._built[0].jobs.backend.db.close(), 10)


def test_functions_framework_serves_the_drain_route(gcp_example: Any, db_url: str) -> None:
    asyncio.run(enqueue(db_url, 3))
    client = gcp_example["drain"].test_client()
    denied = client.get("/", headers={"Authorization": "Bearer wrong"})
    assert denied.status_code == 401
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["www-authenticate"].lower().startswith("bearer")
    assert ready(db_url) == 3

    answer = client.post("/", headers={"Authorization": f"Bearer {CRON_SECRET}"})
    assert answer.status_code == 200, answer.data
    assert answer.headers["content-type"] == "application/json"
    assert answer.get_json()["queues"] == {"emails": {"succeeded": 3, "failed": 0}}
    assert ready(db_url) == 0


def test_cloud_scheduler_with_oidc_sends_the_secret_in_its_own_header(
    gcp_example: Any, db_url: str
) -> None:
    asyncio.run(enqueue(db_url, 1))
    client = gcp_example["drain"].test_client()
    google_token = {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.google.oidc"}
    assert client.get("/", headers=google_token).status_code == 401
    assert ready(db_url) == 1
    answer = client.get("/", headers={**google_token, "X-Drain-Secret": CRON_SECRET})
    assert answer.status_code == 200
    assert answer.get_json()["queues"]["emails"]["succeeded"] == 1


def test_functions_framework_serves_the_webhook_inbox(gcp_example: Any) -> None:
    client = gcp_example["billing_webhook"].test_client()
    body = json.dumps({"type": "invoice.paid"})
    headers = signed(body, "msg_gcp_1")
    first = client.post("/", data=body, headers=headers)
    assert first.status_code == 202, first.data
    assert client.post("/", data=body, headers=headers).get_json()["duplicate"] is True
    assert client.get("/").status_code == 405
    bad = client.post("/", data=body, headers={"content-type": "application/json"})
    assert bad.status_code == 401 and bad.get_json()["code"] == "WEBHOOK_MISSING_HEADERS"


def test_threads_of_one_instance_share_a_loop_and_never_run_a_job_twice(db_url: str) -> None:
    """gunicorn serves a function from several threads: concurrent drains of one instance
    share one pool and split the jobs."""
    import flask

    asyncio.run(enqueue(db_url, 12))
    recorder = Recorder(delay=0.02)
    route, database = route_on(db_url, recorder)
    handle = asgi_handler(route)
    flask_app = flask.Flask("drainpipe_threads")
    flask_app.add_url_rule("/", "drain", lambda: handle(flask.request), methods=["GET"])
    answers: list[Any] = []

    def call() -> None:
        answers.append(
            flask_app.test_client().get("/", headers={"Authorization": CRON_SECRET}).get_json()
        )

    threads = [threading.Thread(target=call) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert len(answers) == 4
        assert sum(a["queues"]["emails"]["succeeded"] for a in answers) == 12
        assert sorted(recorder.seen) == sorted(email(n)["to"] for n in range(12))
        assert ready(db_url) == 0
    finally:
        handle._loop.run(database.close(), 10)


def test_asgi_handler_refuses_bad_options() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    with pytest.raises(TypeError):
        asgi_handler("not an app")  # type: ignore[arg-type]
    for header in ("", "  ", "Authorization"):
        with pytest.raises(ValueError, match="secret_header"):
            asgi_handler(app, secret_header=header)


def test_an_app_that_raises_answers_500_not_a_hung_request() -> None:
    import flask

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    handle = asgi_handler(broken)
    flask_app = flask.Flask("drainpipe_broken")
    flask_app.add_url_rule("/", "x", lambda: handle(flask.request))
    answer = flask_app.test_client().get("/")
    assert answer.status_code == 500 and answer.data == b"Internal Server Error"


@pytest.mark.parametrize(
    ("entry", "platform_loads"),
    [
        ("examples/aws-lambda/handler.py", ()),
        ("examples/gcp/main.py", ("functions_framework",)),
        ("examples/container/worker.py", ()),
        ("examples/postgrest/drain.py", ()),
    ],
)
def test_importing_an_entry_loads_no_database_or_validation_library(
    entry: str, platform_loads: tuple[str, ...]
) -> None:
    """Cold starts pay for every import: the pools, pydantic and mangum come with the first
    event, not with the entry file."""
    path = ROOT / entry
    code = (
        "import importlib, importlib.util, sys\n"
        f"for name in {platform_loads!r}: importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        f"sys.path.insert(0, {str(path.parent)!r})\n"
        f"spec = importlib.util.spec_from_file_location('entry', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(result.stdout.split())
    assert "drainpipe" in loaded  # the probe saw the entry's own imports
    heavy = {"psycopg", "psycopg_pool", "pydantic", "mangum", "flask", "uvicorn", "httpx"}
    assert not loaded & heavy, sorted(loaded & heavy)


def test_a_functions_lazy_app_runs_on_lambda_and_keeps_its_pool_warm(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """functions/orders.py as is, behind a function URL: built on the first event, its pool
    kept across invocations (mangum's lifespan would close it after each one)."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    sys.path.insert(0, str(ROOT / "functions"))
    try:
        orders = load_module(ROOT / "functions/orders.py", "lambda_orders")
        handler = lambda_handler(orders.app)
        body = json.dumps({"item": "book", "quantity": 2}).encode()
        headers = {"idempotency-key": "k-1", "content-type": "application/json"}
        event = http_v2_event(
            "/api/orders", method="POST", headers=headers, body=body, function_url=True
        )
        unconfigured = handler(event, Context(10_000))
        assert unconfigured["statusCode"] == 503
        assert json.loads(unconfigured["body"])["code"] == "NOT_CONFIGURED"

        monkeypatch.setenv("DATABASE_URL", db_url)
        first = handler(event, Context(10_000))
        assert first["statusCode"] == 201, first
        pool = orders.idempotency.db
        second = handler(event, Context(10_000))
        assert second["statusCode"] == 201
        assert second["headers"].get("idempotency-replayed") == "true"
        assert json.loads(second["body"])["id"] == json.loads(first["body"])["id"]
        assert orders.idempotency.db is pool  # the same pool served both invocations
        handler.run_in_loop(orders.app.aclose())
        handler.close()
    finally:
        sys.path.remove(str(ROOT / "functions"))
        sys.modules.pop("lambda_orders", None)
