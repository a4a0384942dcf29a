"""Function files' ``startup()``: awaited once on ASGI lifespan startup (uvicorn), its line
kept for the banner; one that fails or hangs is logged and the server listens anyway."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import httpx
import pytest

from drainpipe.dev import functions as functions_module
from drainpipe.dev.functions import FunctionsApp
from drainpipe.dev.server import start_server

SHARED = """
from drainpipe.serverless import json_response


class App:
    calls = 0

    async def startup(self):
        App.calls += 1
        return f"ready started {App.calls} time(s)"

    async def __call__(self, scope, receive, send):
        await json_response({"calls": App.calls})(scope, receive, send)


app = App()
"""
FILES = {
    "ready.py": "from shared_app import app\n",
    "same.py": "from shared_app import app  # a second route serving the same app\n",
    "broken.py": """
        from drainpipe.serverless import json_response

        class App:
            async def startup(self):
                raise RuntimeError("the database said no")

            async def __call__(self, scope, receive, send):
                await json_response({"ok": True})(scope, receive, send)

        app = App()
    """,
    "slow.py": """
        import asyncio
        from drainpipe.serverless import json_response

        class App:
            async def startup(self):
                await asyncio.sleep(30)

            async def __call__(self, scope, receive, send):
                await json_response({"ok": True})(scope, receive, send)

        app = App()
    """,
}


async def test_startup_runs_once_per_app_and_a_failure_does_not_stop_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "api"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(textwrap.dedent(text))
    (tmp_path / "shared_app.py").write_text(SHARED)
    monkeypatch.setattr(functions_module, "STARTUP_SECONDS", 0.2)
    monkeypatch.syspath_prepend(str(tmp_path))
    app = FunctionsApp.load(folder)
    with caplog.at_level(logging.WARNING, logger="drainpipe.dev"):
        server = await start_server(app)
        try:
            async with httpx.AsyncClient(base_url=server.url) as client:
                answers = [await client.get(path) for path in ("/api/ready", "/api/same")]
                broken = await client.get("/api/broken")
        finally:
            await server.stop()
    assert app.notes == ["ready started 1 time(s)"]
    assert [answer.json() for answer in answers] == [{"calls": 1}, {"calls": 1}]
    assert broken.json() == {"ok": True}
    warnings = sorted(record.getMessage() for record in caplog.records)
    assert warnings == [
        "broken.py: startup failed: the database said no",
        "slow.py: startup failed: no answer within 0.2 s",
    ]


async def test_the_example_agent_inbox_starts_nothing_unconfigured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("DATABASE_URL", "AGENT_TOKEN", "AGENT_LEASE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    from functions.agent_inbox import app

    assert await app.startup() is None
