"""examples/container as its Dockerfile runs it: the image's files laid out as its COPY lines
say, its CMD parsed from the Dockerfile and run (``drainpipe serve``; host and port pointed
at loopback), then what its README does: the health check, the billing webhook, the cron
call of ``/api/drain``, and examples/agent/agent.py acting on the webhook's event through
``/v1``. Twice on one database: the second start finds the agent inbox the first made."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook

from tests.conftest import ROOT
from tests.deploy.test_serve import Output

DOCKERFILE = ROOT / "examples/container/Dockerfile"
BIN = Path(sys.executable).parent
CRON_SECRET = "container-cron-secret-of-32-characters-at-least"
WEBHOOK_SECRET = "whsec_Y29udGFpbmVyLWV4YW1wbGUtc2VjcmV0LTAwMA=="
AGENT_TOKEN = "agt_container_example_token_0000"


def dockerfile() -> tuple[list[tuple[str, str]], list[str]]:
    """The COPY lines into the image's working folder (source, destination) and CMD."""
    copies: list[tuple[str, str]] = []
    command: list[str] = []
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("COPY "):
            *sources, destination = shlex.split(line)[1:]
            if not destination.startswith("/"):  # /src/...: the install step, not the app
                copies.extend((source, destination) for source in sources)
        elif line.startswith("CMD "):
            command = json.loads(line[len("CMD ") :])
    return copies, command


def lay_out_image(folder: Path) -> None:
    for source, destination in dockerfile()[0]:
        target = folder / destination
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, target)


def local_command(port: int) -> list[str]:
    """The image's CMD, with its host and port replaced by loopback and a free port."""
    command = dockerfile()[1]
    assert command[:2] == ["drainpipe", "serve"], command
    for option, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        command[command.index(option) + 1] = value
    return [str(BIN / "drainpipe"), *command[1:]]


def signed(body: str) -> dict[str, str]:
    message_id = f"msg_{uuid.uuid4().hex}"
    stamp = datetime.now(UTC).replace(microsecond=0)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": Webhook(WEBHOOK_SECRET).sign(message_id, stamp, body),
        "content-type": "application/json",
    }


def test_the_dockerfile_serves_api_with_vercels_rewrites() -> None:
    copies, command = dockerfile()
    assert ("api", "./api") in copies and ("vercel.json", "./vercel.json") in copies
    assert command[command.index("--functions") + 1] == "api"


@pytest.mark.slow  # two server starts and two agent runs: about 10 s on a busy machine
def test_the_container_runs_as_its_readme_says_twice(db_url: str, tmp_path: Path) -> None:
    app = tmp_path / "app"  # WORKDIR /app
    lay_out_image(app)
    env = {k: v for k, v in os.environ.items() if k not in ("MANAGEMENT_TOKENS",)}
    env.update(
        DATABASE_URL=db_url,
        CRON_SECRET=CRON_SECRET,
        WEBHOOK_SECRET=WEBHOOK_SECRET,
        DRAINPIPE_SCOPE_KEY="container-scope-key-0000",
        AGENT_TOKEN=AGENT_TOKEN,
        AGENT_LEASE_SECRET="container-lease-secret-0000",
        PYTHONUNBUFFERED="1",
    )
    inbox_ids = []
    for attempt in (1, 2):
        process = subprocess.Popen(  # noqa: S603 - the installed CLI, the Dockerfile's arguments
            local_command(0), cwd=app, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        output = Output(process)
        try:
            port = output.wait_for(r"listening on http://127\.0\.0\.1:(\d+)").group(1)
            inbox_id = output.wait_for(r"started: agent inbox billing-agent is (inb_\w+)")[1]
            inbox_ids.append(inbox_id)
            base = f"http://127.0.0.1:{port}"
            for path in ("/api/drain", "/api/billing-webhook", "/v1/:path*"):
                output.wait_for(re.escape(f"  {path}  (api/"))
            assert httpx.get(f"{base}/healthz").json() == {"ok": True}
            # a webhook before any agent has called /v1: the inbox exists from the start
            body = '{"type": "invoice.paid", "amount": 12}'
            hook = httpx.post(f"{base}/api/billing-webhook", content=body, headers=signed(body))
            assert hook.status_code == 202, hook.text
            # the README's cron call
            bearer = {"Authorization": f"Bearer {CRON_SECRET}"}
            drained = httpx.get(f"{base}/api/drain", headers=bearer, timeout=30)
            assert drained.status_code == 200, drained.text
            # examples/agent/agent.py, as its docstring runs it (once: stop when empty)
            agent = subprocess.run(  # noqa: S603 - our interpreter, the example's file
                [sys.executable, str(ROOT / "examples/agent/agent.py"), "--once"],
                env={**env, "AGENT_URL": base, "AGENT_INBOX": inbox_id},
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert agent.returncode == 0, agent.stderr
            assert agent.stdout.splitlines()[-1] == "handled 1 events", (attempt, agent.stdout)
            assert "invoice.paid" in agent.stdout
        finally:
            process.send_signal(signal.SIGTERM)
            status = process.wait(20)
            output._thread.join(5)  # read to the end before the pipe closes
            assert process.stdout is not None
            process.stdout.close()
        assert status == 0, output.text
        assert "drainpipe serve: stopped" in output.text
        assert "Traceback" not in output.text, output.text
    assert inbox_ids[0] == inbox_ids[1]
