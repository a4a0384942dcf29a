"""``drainpipe serve`` and ``drainpipe work`` as the real processes a container runs, stopped
with SIGTERM in the middle of a request or a job: the job completes or comes back after
its lease, never lost, and the process exits 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import drainpipe
from tests.conftest import ROOT

SECRET = "serve-secret-0123456789abcdef0123456789abcdef"

FUNCTION = '''
import asyncio
import os
from pathlib import Path

from drainpipe.jobs import Jobs

MARKS = Path(os.environ["MARKS"])


async def handler(payload, job):
    (MARKS / f"started-{job.id}").touch()
    await asyncio.sleep(float(os.environ["JOB_SECONDS"]))
    (MARKS / f"finished-{job.id}").touch()


class Drain:
    """The drain route, with an aclose that lifespan shutdown must call."""

    def __init__(self):
        self.jobs = Jobs(os.environ["DATABASE_URL"], {"emails": dict})
        self.route = self.jobs.drain_route(secret="serve-secret-0123456789abcdef0123456789abcdef", handlers={"emails": handler})

    async def __call__(self, scope, receive, send):
        await self.route(scope, receive, send)

    async def aclose(self):
        await self.jobs.close()
        (MARKS / "closed").touch()


app = Drain()
'''

WORKER_APP = """
import asyncio
import os
from pathlib import Path

from drainpipe.jobs import Jobs
from drainpipe.serve import WorkerApp

MARKS = Path(os.environ["MARKS"])


async def send_email(payload, job):
    (MARKS / f"started-{job.id}").touch()
    await asyncio.sleep(float(os.environ["JOB_SECONDS"]))
    (MARKS / f"finished-{job.id}").touch()


def worker():
    jobs = Jobs(os.environ["DATABASE_URL"], {"emails": dict, "other": dict})
    return WorkerApp(jobs, {"emails": send_email}, lease=2)
"""


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


def environment(db_url: str, marks: Path, job_seconds: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        MARKS=str(marks),
        JOB_SECONDS=str(job_seconds),
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT / "lib"), str(ROOT)]),
    )
    return env


def start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and CLI
        [sys.executable, "-m", "drainpipe.cli", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class Output:
    """Reads a process's output in a thread, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._process = process
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if found := re.search(pattern, line):
                    return found
            if self._process.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no line matching {pattern!r} in: {self.text}")

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def wait_for_file(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


async def counts(db_url: str) -> tuple[int, int, int, int]:
    """(ready, in flight, delayed, dead) of the emails queue; all 0: every job completed."""
    async with drainpipe.Jobs(db_url, {"emails": dict}) as jobs:
        stat = (await jobs.stats(["emails"]))["emails"]
        return stat.ready, stat.in_flight, stat.delayed, stat.dead


async def enqueue(db_url: str) -> int:
    async with drainpipe.Jobs(db_url, {"emails": dict}) as jobs:
        return await jobs.enqueue("emails", {"to": "a@example.com"})


# -- drainpipe serve ---------------------------------------------------------------------


def test_serve_finishes_the_request_in_flight_on_sigterm(
    db_url: str, tmp_path: Path, marks: Path, processes: list[subprocess.Popen[str]]
) -> None:
    functions = tmp_path / "api"
    functions.mkdir()
    (functions / "drain.py").write_text(textwrap.dedent(FUNCTION))
    job_id = asyncio.run(enqueue(db_url))
    process = start(
        ["serve", "--functions", str(functions), "--host", "127.0.0.1", "--port", "0"],
        environment(db_url, marks, job_seconds=1.0),
        tmp_path,
    )
    processes.append(process)
    output = Output(process)
    port = output.wait_for(r"listening on http://127\.0\.0\.1:(\d+)").group(1)
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(base + "/healthz").json() == {"ok": True}
    assert httpx.get(base + "/api/drain").status_code == 401
    assert httpx.get(base + "/api/nothing").status_code == 404

    answers: list[httpx.Response] = []
    call = threading.Thread(
        target=lambda: answers.append(
            httpx.get(
                base + "/api/drain", headers={"Authorization": f"Bearer {SECRET}"}, timeout=20
            )
        )
    )
    call.start()
    wait_for_file(marks / f"started-{job_id}")
    process.send_signal(signal.SIGTERM)  # mid-request, mid-job
    call.join(20)
    assert process.wait(20) == 0, output.text
    assert len(answers) == 1 and answers[0].status_code == 200
    assert answers[0].json()["queues"] == {"emails": {"succeeded": 1, "failed": 0}}
    assert (marks / f"finished-{job_id}").exists()
    assert (marks / "closed").exists()  # lifespan shutdown closed the function's pool
    assert asyncio.run(counts(db_url)) == (0, 0, 0, 0)  # completed
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/healthz", timeout=2)


def test_serve_serves_the_same_routes_as_dev(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("DATABASE_URL", None)  # the functions answer 503 NOT_CONFIGURED, not 500
    process = start(
        ["serve", "--functions", str(ROOT / "api"), "--host", "127.0.0.1", "--port", "0"],
        env,
        tmp_path,
    )
    processes.append(process)
    output = Output(process)
    port = output.wait_for(r"listening on http://127\.0\.0\.1:(\d+)").group(1)
    for path in ("/api/drain", "/api/orders", "/api/billing-webhook"):
        assert path in output.text
    answer = httpx.post(f"http://127.0.0.1:{port}/api/orders", json={"item": "x"})
    assert answer.status_code == 503 and answer.json()["code"] == "NOT_CONFIGURED"
    process.send_signal(signal.SIGINT)
    assert process.wait(20) == 0, output.text


def test_serve_refuses_a_missing_functions_folder(tmp_path: Path) -> None:
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "drainpipe.cli", "serve", "--functions", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2 and "no functions folder" in result.stderr


# -- drainpipe work ----------------------------------------------------------------------


def test_work_lets_the_running_job_finish_on_sigterm(
    db_url: str, tmp_path: Path, marks: Path, processes: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "workapp.py").write_text(textwrap.dedent(WORKER_APP))
    first = asyncio.run(enqueue(db_url))
    second = asyncio.run(enqueue(db_url))
    process = start(
        ["work", "emails", "--app", "workapp:worker"],
        environment(db_url, marks, job_seconds=0.8),
        tmp_path,
    )
    processes.append(process)
    output = Output(process)
    wait_for_file(marks / f"started-{first}")
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, output.text
    assert (marks / f"finished-{first}").exists()
    # the first completed; no new claim after the signal: the second one waits, ready
    assert not (marks / f"started-{second}").exists()
    assert asyncio.run(counts(db_url)) == (1, 0, 0, 0)
    assert "emails: 1 succeeded, 0 failed" in output.text


def test_work_past_its_grace_leaves_the_job_claimable_after_the_lease(
    db_url: str, tmp_path: Path, marks: Path, processes: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "workapp.py").write_text(textwrap.dedent(WORKER_APP))
    job_id = asyncio.run(enqueue(db_url))
    process = start(
        ["work", "--app", "workapp:worker", "--grace", "0.2", "--lease", "0.8"],
        environment(db_url, marks, job_seconds=60),
        tmp_path,
    )
    processes.append(process)
    output = Output(process)
    wait_for_file(marks / f"started-{job_id}")
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, output.text
    assert "cancelling" in output.text
    assert not (marks / f"finished-{job_id}").exists()

    async def claim_again() -> Any:
        async with drainpipe.Jobs(db_url, {"emails": dict}) as jobs:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if claimed := await jobs.claim("emails", lease=30):
                    return claimed[0]
                await asyncio.sleep(0.1)
            return None

    again = asyncio.run(claim_again())
    assert again is not None and again.id == job_id and again.attempts == 2


def test_work_reports_a_wrong_app_or_queue(db_url: str, tmp_path: Path, marks: Path) -> None:
    (tmp_path / "workapp.py").write_text(textwrap.dedent(WORKER_APP))
    env = environment(db_url, marks, job_seconds=0)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603
            [sys.executable, "-m", "drainpipe.cli", "work", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    env.pop("DRAINPIPE_APP", None)
    no_app = run("emails")
    assert no_app.returncode == 2 and "pass --app" in no_app.stderr
    missing = run("--app", "nowhere:worker")
    assert missing.returncode == 2 and "cannot import nowhere" in missing.stderr
    no_attr = run("--app", "workapp:nothing")
    assert no_attr.returncode == 2 and "has no nothing" in no_attr.stderr
    malformed = run("--app", "workapp")
    assert malformed.returncode == 2 and "module:attr" in malformed.stderr
    unhandled = run("other", "--app", "workapp:worker")
    assert unhandled.returncode == 2 and "no handler for queue(s) other" in unhandled.stderr
    not_an_app = run("--app", "os:sep")
    assert not_an_app.returncode == 2 and "WorkerApp" in not_an_app.stderr


def test_work_with_schedules_enqueues_due_runs_and_works_them(
    db_url: str, tmp_path: Path, marks: Path, processes: list[subprocess.Popen[str]]
) -> None:
    async def schedule() -> None:
        async with drainpipe.Jobs(db_url, {"emails": dict}) as jobs:
            await jobs.schedule("every-second", "1 second", "emails", {"to": "s@example.com"})

    asyncio.run(schedule())
    (tmp_path / "workapp.py").write_text(textwrap.dedent(WORKER_APP))
    process = start(
        ["work", "emails", "--app", "workapp:worker", "--schedules", "0.2"],
        environment(db_url, marks, job_seconds=0),
        tmp_path,
    )
    processes.append(process)
    output = Output(process)
    deadline = time.monotonic() + 15
    while not any(marks.glob("finished-*")):
        assert time.monotonic() < deadline, output.text
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, output.text
    assert "succeeded" in output.text


def test_the_container_example_worker_runs_the_functions_handlers(
    db_url: str, tmp_path: Path, marks: Path, processes: list[subprocess.Popen[str]]
) -> None:
    asyncio.run(enqueue(db_url))
    env = environment(db_url, marks, job_seconds=0)
    env["PYTHONPATH"] += os.pathsep + str(ROOT / "examples/container")
    env["FUNCTIONS_DIR"] = str(ROOT / "functions")
    process = start(["work", "emails", "--app", "worker:worker"], env, tmp_path)
    processes.append(process)
    output = Output(process)
    output.wait_for(r"drainpipe work: emails")
    deadline = time.monotonic() + 15
    while asyncio.run(counts(db_url)) != (0, 0, 0, 0):
        assert time.monotonic() < deadline, output.text
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0, output.text
    assert "emails: 1 succeeded, 0 failed" in output.text
