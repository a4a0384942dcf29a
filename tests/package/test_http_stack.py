"""One HTTP stack (docs/architecture.md, "One HTTP stack"): every app drainpipe ships runs
on ``drainpipe.http`` and its routing and WebSocket modules, never on Starlette.

Starlette is named in one module only, ``http_starlette.py``, and only inside its
functions: they build a Starlette response for a request a user's own Starlette or FastAPI
app handed in (so Starlette is loaded already). Everything else is checked twice: no
module imports Starlette, and every app answers, WebSocket included, in an interpreter
where importing Starlette fails."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "lib" / "drainpipe"
ADAPTER = PACKAGE / "http_starlette.py"


def _starlette_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, inside a function) of each import of starlette in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            if any(name.split(".")[0] == "starlette" for name in names):
                found.append((child.lineno, in_function))
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, inner)

    visit(tree, False)
    return found


def test_no_module_of_drainpipe_imports_starlette_but_the_adapter() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != ADAPTER and (lines := _starlette_imports(path))
    }
    assert offenders == {}
    adapter = _starlette_imports(ADAPTER)
    assert adapter, "the adapter's check found nothing: the parse is wrong"
    assert all(in_function for _, in_function in adapter), adapter


def test_starlette_is_not_a_dependency_of_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [spec.split(">")[0].split("[")[0].strip() for spec in project["dependencies"]]
    assert "starlette" not in names
    for extra, specs in project["optional-dependencies"].items():
        if extra != "dev":  # the tests build Starlette apps of their own
            assert not any(spec.startswith("starlette") for spec in specs), extra


SERVE_WITHOUT_STARLETTE = """
import asyncio, sys
sys.modules["starlette"] = None  # any import of it now raises ImportError

import drainpipe
from drainpipe import AgentInboxes, Jobs, Principal, WebhookInbox, bearer_tokens

DSN = "postgresql://postgres@127.0.0.1:1/unreached"  # every request is refused before SQL


async def call(app, method, path, headers=()):
    sent = []
    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": method, "path": path, "root_path": "",
             "query_string": b"", "headers": list(headers)}
    await app(scope, receive, send)
    return sent[0]["status"]


async def stream(app, path):
    sent = []
    incoming = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]
    async def receive():
        return incoming.pop(0)
    async def send(message):
        sent.append(message)
    scope = {"type": "websocket", "path": path, "root_path": "", "query_string": b"",
             "headers": []}
    await app(scope, receive, send)
    return [m["type"] for m in sent], sent[-1].get("code")


async def main():
    authorize = bearer_tokens({"t" * 16: Principal("a")})
    agents = AgentInboxes(DSN, lease_secret="s" * 16)
    inbox_app = agents.app(authorize=authorize)
    assert await call(inbox_app, "GET", "/v1/agent/inbox/inb_1/next") == 401
    assert await call(inbox_app, "GET", "/v1/nowhere") == 404
    assert await call(inbox_app, "GET", "/v1/events/evt_1/ack") == 405
    assert await stream(inbox_app, "/v1/agent/inbox/inb_1/stream") == (
        ["websocket.accept", "websocket.send", "websocket.close"], 4401)
    jobs = Jobs(DSN, {"q": dict})
    assert await call(jobs.executor_app(tokens={"e" * 16: "*"}), "POST", "/claim") == 401
    admin = jobs.management_app(authorize=authorize, cursor_secret="c" * 16, target="t")
    assert await call(admin, "GET", "/jobs") == 401
    assert await call(admin, "GET", "/") == 200
    route = jobs.drain_route(secret="d" * 32, handlers={"q": lambda payload, job: None})
    assert await call(route, "POST", "/") == 401
    webhooks = WebhookInbox(DSN, source="s", secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
    assert await call(webhooks.app, "POST", "/") == 401
    print("ok")

asyncio.run(main())
"""


def test_every_app_serves_in_an_interpreter_without_starlette() -> None:
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", SERVE_WITHOUT_STARLETTE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
