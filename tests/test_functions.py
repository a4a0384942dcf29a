"""vercel.json and the deployable functions/ it points at."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import drainpipe
from drainpipe.devserver import FunctionsApp, load_function, start_server
from tests.conftest import ROOT, connect

CONFIG = json.loads((ROOT / "vercel.json").read_text())


class Email(BaseModel):
    to: str
    subject: str = ""


def _file(dest: str) -> Path:
    return ROOT / dest.lstrip("/")


def test_vercel_json_points_at_function_files_that_exist() -> None:
    builds = [build["src"] for build in CONFIG["builds"]]
    routes = {route["src"]: route["dest"] for route in CONFIG["routes"]}
    assert routes == {
        "/api/drain": "functions/drain.py",
        "/api/orders": "functions/orders.py",
        "/api/billing-webhook": "functions/billing_webhook.py",
    }
    for dest in [*builds, *routes.values()]:
        assert _file(dest).is_file(), dest
    assert set(routes.values()) <= set(builds)  # every routed file is built as a function
    [cron] = CONFIG["crons"]
    assert cron == {"path": "/api/drain", "schedule": "* * * * *"}
    assert any(re.fullmatch(src, cron["path"]) for src in routes)


@pytest.mark.parametrize("dest", sorted({route["dest"] for route in CONFIG["routes"]}))
def test_each_function_exposes_an_asgi_app(dest: str) -> None:
    app = load_function(_file(dest))
    assert callable(app)


def test_functions_import_without_any_configuration() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CRON_SECRET", "WEBHOOK_SECRET", "DRAIN_BUDGET")
    }
    code = (
        "from drainpipe.devserver import FunctionsApp\n"
        "app = FunctionsApp.load('functions')\n"
        "print(sorted(app.apps))\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert {"drain", "orders", "billing_webhook"} <= set(eval(result.stdout))  # noqa: S307


async def test_unconfigured_drain_function_answers_503(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "CRON_SECRET"):
        monkeypatch.delenv(name, raising=False)
    app = load_function(ROOT / "functions/drain.py")
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://function") as client:
        response = await client.get("/api/drain", headers={"Authorization": "Bearer x"})
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "NOT_CONFIGURED" and body["instance"] == "/api/drain"


@pytest.mark.parametrize("dest", sorted({route["dest"] for route in CONFIG["routes"]}))
async def test_every_unconfigured_function_answers_a_503_problem(
    dest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # never a bare 500 (functions/orders.py raised RuntimeError without DATABASE_URL)
    for name in ("DATABASE_URL", "CRON_SECRET", "WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    app = load_function(_file(dest))
    path = next(src for src, d in ((r["src"], r["dest"]) for r in CONFIG["routes"]) if d == dest)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://function") as client:
        response = await client.post(path, content=b"{}", headers={"Idempotency-Key": "k"})
    assert response.status_code == 503, dest
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "NOT_CONFIGURED" and body["instance"] == path
    assert body["kind"] == "network" and "detail" not in body


async def test_drain_function_drains_the_queue_and_the_billing_inbox(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("CRON_SECRET", "function-secret")
    monkeypatch.setenv("DRAIN_BUDGET", "10")
    jobs = drainpipe.Jobs(db_url, {"emails": Email})
    inbox = drainpipe.WebhookInbox(db_url, source="billing")
    try:
        await jobs.enqueue("emails", {"to": "a@x", "subject": "hi"})
        await inbox.store(id="evt_1", payload={"amount": 5}, type="invoice.paid")
        server = await start_server(FunctionsApp.load(ROOT / "functions"))
        try:
            async with httpx.AsyncClient(base_url=server.url) as client:
                denied = await client.get("/api/drain")
                response = await client.get(
                    "/api/drain", headers={"Authorization": "Bearer function-secret"}
                )
                missing = await client.get("/api/nope")
        finally:
            await server.stop()  # lifespan shutdown closes the function's pool
        assert denied.status_code == 401
        assert response.status_code == 200
        report: dict[str, Any] = response.json()
        assert report["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
        assert report["inboxes"] == {"billing": {"succeeded": 1, "failed": 0}}
        assert report["errors"] == 0 and report["more"] is False
        assert missing.status_code == 404
        conn = await connect(db_url)
        try:
            cur = await conn.execute("SELECT message_id, status FROM drainpipe.webhook_inbox")
            assert await cur.fetchall() == [("evt_1", "processed")]
        finally:
            await conn.close()
    finally:
        await inbox.close()
        await jobs.backend.db.close()  # type: ignore[attr-defined]
