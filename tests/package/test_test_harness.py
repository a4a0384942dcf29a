"""The test harness itself: it never reaches an application database, and its cleanup drops
only test databases nobody uses (other test runs share this server)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests import conftest as harness
from tests.conftest import ROOT, with_database


def test_the_session_has_no_database_url() -> None:
    # conftest removes it at configure time, so no fixture, function entry or subprocess
    # started by a test can read an application's database URL
    assert "DATABASE_URL" not in os.environ


def test_database_url_is_ignored_and_the_header_says_so() -> None:
    env = {**os.environ, "DATABASE_URL": "postgresql://app@app-db.invalid:5432/production"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "tests/package/test_test_harness.py::test_the_session_has_no_database_url",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    header = [line for line in done.stdout.splitlines() if "DATABASE_URL is ignored" in line]
    assert len(header) == 1, done.stdout


@pytest.fixture
def admin(server_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(server_dsn, autocommit=True) as connection:
        yield connection


def _exists(admin: psycopg.Connection[Any], name: str) -> bool:
    return (
        admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        is not None
    )


@pytest.fixture
def made(admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of databases a test creates; whatever the cleanup left is dropped afterwards."""
    monkeypatch.setattr(harness, "_dropped_databases", [])  # keep them out of the run's summary
    names: list[str] = []
    yield names
    for name in names:
        if _exists(admin, name):
            admin.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false')
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _create(admin: psycopg.Connection[Any], made: list[str], name: str) -> str:
    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    made.append(name)
    return name


def test_a_young_clone_stays(admin: psycopg.Connection[Any], made: list[str]) -> None:
    clone = _create(admin, made, "t_" + uuid.uuid4().hex[:16])
    assert harness.drop_if_stale(admin, clone) is False
    assert _exists(admin, clone)


def test_an_old_clone_goes_unless_someone_is_connected(
    admin: psycopg.Connection[Any],
    made: list[str],
    server_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(harness, "STALE_AFTER", timedelta(0))  # every database is "old" now
    left_over = _create(admin, made, "t_" + uuid.uuid4().hex[:16])
    busy = _create(admin, made, "t_" + uuid.uuid4().hex[:16])
    not_ours = _create(admin, made, "t_app_" + uuid.uuid4().hex[:8])
    with psycopg.connect(with_database(server_dsn, busy)):
        assert harness.drop_if_stale(admin, busy) is False
        assert harness.drop_if_stale(admin, left_over) is True
        assert harness.drop_if_stale(admin, not_ours) is False
    assert (_exists(admin, left_over), _exists(admin, busy), _exists(admin, not_ours)) == (
        False,
        True,
        True,
    )


def test_a_template_another_session_holds_stays(
    admin: psycopg.Connection[Any],
    made: list[str],
    server_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(harness, "STALE_AFTER", timedelta(0))
    template = _create(admin, made, f"{harness.TEMPLATE_PREFIX}pgmq_{uuid.uuid4().hex[:12]}")
    admin.execute(f'ALTER DATABASE "{template}" WITH IS_TEMPLATE true')
    with psycopg.connect(server_dsn, autocommit=True) as other_session:
        other_session.execute(
            "SELECT pg_advisory_lock_shared(%s, hashtext(%s))",
            (harness.IN_USE_LOCK_CLASS, template),
        )
        assert harness.drop_if_stale(admin, template) is False
        assert _exists(admin, template)
        row = admin.execute(
            "SELECT datistemplate FROM pg_database WHERE datname = %s", (template,)
        ).fetchone()
        assert row == (True,)
        # the session lets go (ending it does too, a moment after close returns)
        other_session.execute(
            "SELECT pg_advisory_unlock_shared(%s, hashtext(%s))",
            (harness.IN_USE_LOCK_CLASS, template),
        )
    # nobody holds it now: the template is stale and unused
    assert harness.drop_if_stale(admin, template) is True
    assert not _exists(admin, template)


def test_a_template_used_recently_stays(
    admin: psycopg.Connection[Any], made: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    template = _create(admin, made, f"{harness.TEMPLATE_PREFIX}table_{uuid.uuid4().hex[:12]}")
    harness._stamp_last_use(admin, template)
    monkeypatch.setattr(harness, "STALE_AFTER", timedelta(minutes=30))
    assert harness.drop_if_stale(admin, template) is False
    # a stamp two hours old (and a database created just now) is still "used recently":
    # the later of the two counts
    admin.execute(
        f"COMMENT ON DATABASE \"{template}\" IS 'drainpipe test template, last used at 2020-01-01T00:00:00+00:00'"
    )
    assert harness.drop_if_stale(admin, template) is False
    monkeypatch.setattr(harness, "STALE_AFTER", timedelta(0))
    assert harness.drop_if_stale(admin, template) is True


def test_the_sessions_own_templates_are_stamped(
    admin: psycopg.Connection[Any], templates: dict[str, str]
) -> None:
    for name in templates.values():
        assert harness._last_use(admin, name) is not None
        row = admin.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,),
        ).fetchone()
        assert row is not None and "last used at" in str(row[0])
