"""The examples in ``examples/django`` and ``examples/flask`` run their own tests, on a
fresh database of the suite's server (drainpipe's SQL installed)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def run(args: list[str], cwd: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOP_DATABASE_URL": url, "PYTHONPATH": f"{ROOT / 'lib'}"}
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_django_example_enqueues_in_a_views_transaction_and_drains(
    jobs_db_url: str,
) -> None:
    result = run(
        ["manage.py", "test", "--keepdb", "--noinput", "-v", "2"],
        str(ROOT / "examples/django"),
        jobs_db_url,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "test_enqueue_commits_with_the_order_and_drains" in output and "OK" in output
    assert "test_the_webhook_view_stores_a_delivery_once" in output


def test_the_flask_example(db_url: str) -> None:
    result = run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        str(ROOT / "examples/flask"),
        db_url,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "passed" in result.stdout
