"""The examples in ``examples/django`` and ``examples/flask`` run as their READMEs say, twice
in a row on one fresh database of the suite's server: the second run finds what the first
left (keys, deliveries, rows) and passes all the same."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook

from tests.conftest import ROOT

BIN = Path(sys.executable).parent  # the console scripts next to this interpreter
WEBHOOK_SECRET = "whsec_ZmxvdzpleGFtcGxlLXNlY3JldC0wMDAwMDA="  # the Flask README's


def run(args: list[str], cwd: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOP_DATABASE_URL": url, "PYTHONPATH": f"{ROOT / 'lib'}"}
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # Django's start, twice: about 6 s a run on a busy machine
def test_the_django_example_enqueues_in_a_views_transaction_and_drains(
    jobs_db_url: str, backend_name: str
) -> None:
    # twice on one storage (a second run passes on what the first left); once on the other
    for attempt in (1, 2) if backend_name == "pgmq" else (1,):
        result = run(
            ["manage.py", "test", "--keepdb", "--noinput", "-v", "2"],
            str(ROOT / "examples/django"),
            jobs_db_url,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"run {attempt}:\n{output[-4000:]}"
        assert "test_enqueue_commits_with_the_order_and_drains" in output and "OK" in output
        assert "test_the_webhook_view_stores_a_delivery_once" in output


@pytest.mark.slow  # pytest and Flask started twice: about 3.5 s a run
def test_the_flask_examples_tests(db_url: str) -> None:
    for attempt in (1, 2):
        result = run(
            ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
            str(ROOT / "examples/flask"),
            db_url,
        )
        assert result.returncode == 0, f"run {attempt}:\n{(result.stdout + result.stderr)[-4000:]}"
        assert "2 passed" in result.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(process: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, _ = process.communicate()
            raise AssertionError(f"flask exited {process.returncode}:\n{out}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("flask did not start")


@pytest.mark.slow  # `drainpipe sql apply` and `flask run`, twice: about 8 s
def test_flask_app_run_serves_orders_and_webhooks_as_the_readme_says(db_url: str) -> None:
    """The README's commands: ``drainpipe sql apply``, then ``flask --app app run``, with
    ``DATABASE_URL`` and ``WEBHOOK_SECRET`` exported; twice."""
    folder = ROOT / "examples/flask"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASK_")}
    env.update(DATABASE_URL=db_url, WEBHOOK_SECRET=WEBHOOK_SECRET, PYTHONUNBUFFERED="1")
    for attempt in (1, 2):
        applied = subprocess.run(  # noqa: S603 - the installed CLI, fixed arguments
            [str(BIN / "drainpipe"), "sql", "apply"],
            cwd=folder, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.startswith(
            "up to date" if attempt == 2 else ("up to date", "applied")
        )
        port = _free_port()
        process = subprocess.Popen(  # noqa: S603 - the installed CLI, fixed arguments
            [str(BIN / "flask"), "--app", "app", "run", "--port", str(port)],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(process, base)
            key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
            order = {"email": "a@example.com"}
            created = httpx.post(f"{base}/orders", json=order, headers=key)
            assert created.status_code == 201, created.text
            replayed = httpx.post(f"{base}/orders", json=order, headers=key)
            assert replayed.headers["Idempotency-Replayed"] == "true"
            assert replayed.json() == created.json()
            message_id = f"msg_{uuid.uuid4().hex}"
            body = '{"type": "invoice.paid"}'
            stamp = datetime.now(UTC).replace(microsecond=0)
            headers = {
                "webhook-id": message_id,
                "webhook-timestamp": str(int(stamp.timestamp())),
                "webhook-signature": Webhook(WEBHOOK_SECRET).sign(message_id, stamp, body),
                "content-type": "application/json",
            }
            stored = httpx.post(f"{base}/hooks/billing", content=body, headers=headers)
            assert stored.status_code == 202, stored.text
        finally:
            process.send_signal(signal.SIGINT)
            out, _ = process.communicate(timeout=20)
        assert not re.search(r"Traceback|Error:", out), out
