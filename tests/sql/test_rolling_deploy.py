"""A rolling deploy: the previous release's code keeps working against the migrated SQL.

Release 0 is commit ``4afd98a`` (the code that called unversioned SQL functions). Its
``lib/drainpipe`` and ``sql/`` are extracted into a temporary package and run in a
subprocess with that folder first on ``sys.path``, while this process runs the new code
against the same database, as on Vercel while a deploy rolls out.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe.cli import main
from tests.conftest import ROOT, clone_database, connect, drop_database, with_database

RELEASE_0 = "4afd98a"

# The previous release's code, run as `python old.py <package dir> <database url> <phase>`.
OLD_CODE = textwrap.dedent(
    '''
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    import drainpipe
    from drainpipe.sqlmodules import install

    assert drainpipe.__file__.startswith(sys.argv[1]), drainpipe.__file__
    url, phase, backend = sys.argv[2], sys.argv[3], sys.argv[4]


    async def before() -> dict:
        """Release 0 deployed: its install, and work waiting when the new release comes."""
        applied = await install(url, ["jobs", "idempotency", "webhook-inbox"], backend=backend)
        async with drainpipe.Jobs(url, {"emails": dict}) as jobs:
            waiting = await jobs.enqueue("emails", {"n": "before"})
        return {"applied": applied, "waiting": waiting}


    async def during() -> dict:
        """Release 0 still serving requests after the migration ran."""
        result = {}
        result["install"] = await install(
            url, ["jobs", "idempotency", "webhook-inbox"], backend=backend
        )
        async with drainpipe.Jobs(url, {"emails": dict}) as jobs:
            result["enqueued"] = await jobs.enqueue("emails", {"n": "old"})
            result["deduped"] = [
                await jobs.enqueue("emails", {"n": "key"}, dedupe_key="k") for _ in range(2)
            ]
            claimed = await jobs.claim("emails", batch=10)
            result["claimed"] = sorted(job.payload["n"] for job in claimed)
            done = [job for job in claimed if job.payload["n"] in ("before", "old")]
            failing = [job for job in claimed if job.payload["n"] == "key"]
            result["completed"] = [await jobs.complete(job) for job in done]
            result["lease_extended"] = [await jobs.extend(job, lease=60) for job in failing]
            result["failed"] = [await jobs.fail(job, RuntimeError("boom")) for job in failing]
            result["stats_dead"] = (await jobs.stats(["emails"]))["emails"].dead
            result["for_new"] = await jobs.enqueue("emails", {"n": "for new"})
        idem = drainpipe.Idempotency(url)
        begun = await idem.begin("old-key", "fp")
        result["begin"] = begun.state
        result["stored"] = await idem.complete("old-key", begun.holder, 201, b"made")
        replay = await idem.begin("old-key", "fp")
        result["replay"] = [replay.state, replay.status, replay.body.decode()]
        result["new_replay"] = [
            (b := await idem.begin("new-key", "fp")).state, b.status, (b.body or b"").decode()
        ]
        await idem.db.close()
        inbox = drainpipe.WebhookInbox(url, source="rolling")
        result["stored_webhook"] = (await inbox.store(id="old-1", payload={"a": 1}, type="t")).duplicate
        seen = []
        report = await inbox.process(lambda message: seen.append(message.message_id))
        result["processed"] = [report.succeeded, sorted(seen)]
        await inbox.close()
        return result


    print(json.dumps(asyncio.run({"before": before, "during": during}[phase]())))
    '''
)


@pytest.fixture(scope="module")
def release_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Release 0's package (code and SQL) in a folder of its own."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git history (release 0 is commit 4afd98a)")
    listed = subprocess.run(  # noqa: S603 - git on our own repository
        [git, "-C", str(ROOT), "ls-tree", "-r", "--name-only", RELEASE_0, "lib/drainpipe", "sql"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip(f"release 0 ({RELEASE_0}) is not in this checkout: {listed.stderr}")
    folder = tmp_path_factory.mktemp("release_0")
    for name in listed.stdout.split():
        content = subprocess.run(  # noqa: S603
            [git, "-C", str(ROOT), "show", f"{RELEASE_0}:{name}"], capture_output=True, check=True
        ).stdout
        # the wheel's layout: sql/ inside the package
        target = folder / (
            name.removeprefix("lib/") if name.startswith("lib/") else "drainpipe/" + name
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    script = folder / "old.py"
    script.write_text(OLD_CODE, encoding="utf-8")
    return folder


def run_old(release_0: Path, url: str, phase: str, backend: str) -> dict[str, Any]:
    result = subprocess.run(  # noqa: S603 - our own script
        [sys.executable, str(release_0 / "old.py"), str(release_0), url, phase, backend],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=release_0,  # not the checkout: its lib/ must not shadow release 0
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    name = clone_database(server_dsn, "template0")
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.mark.parametrize("backend", ["pgmq", "table"])
def test_release_0_keeps_working_during_a_rolling_deploy(
    release_0: Path, empty_db: str, backend: str, capsys: Any
) -> None:
    before = run_old(release_0, empty_db, "before", backend)
    assert before["applied"] == ["jobs", "idempotency", "webhook-inbox"]

    # the new release's deploy step: verify says what is pending, apply migrates in place
    verify = ["sql", "verify", "--database-url", empty_db]
    assert main(verify) == 1
    out = capsys.readouterr().out
    assert "pending: jobs 0001_release_0" in out and "pending: jobs 0002_v1_functions" in out
    assert "pending: webhook-inbox 0002_v1_functions" in out
    assert "contract" not in out  # the drops wait for the next release
    assert main(["sql", "apply", "--database-url", empty_db, "--backend", backend]) == 0
    assert "jobs 0002_v1_functions" in capsys.readouterr().out
    assert main(verify) == 0
    assert capsys.readouterr().out.startswith(f"up to date (backend={backend}")

    async def new_code_first() -> None:
        # the new release uses the idempotency key first; the old one must replay it
        idem = drainpipe.Idempotency(empty_db)
        begun = await idem.begin("new-key", "fp")
        assert begun.holder is not None
        assert await idem.complete("new-key", begun.holder, 200, b"from new")
        await idem.db.close()
        inbox = drainpipe.WebhookInbox(empty_db, source="rolling")
        assert (await inbox.store(id="new-1", payload={}, type="t")).duplicate is False
        await inbox.close()

    asyncio.run(new_code_first())
    during = run_old(release_0, empty_db, "during", backend)
    # release 0's install finds its modules up to date: it does not re-apply its own SQL
    assert during["install"] == []
    # the job waiting since before the migration, and the ones enqueued now
    assert during["claimed"] == ["before", "key", "old"]
    assert during["deduped"][0] == during["deduped"][1]
    assert during["completed"] == [True, True]
    assert during["failed"] == ["queued"]
    assert during["lease_extended"] == [True]
    assert during["stats_dead"] == 0
    assert during["begin"] == "started" and during["stored"] is True
    assert during["replay"] == ["replay", 201, "made"]
    assert during["new_replay"] == ["replay", 200, "from new"]
    assert during["stored_webhook"] is False
    assert during["processed"] == [2, ["new-1", "old-1"]]

    async def new_code_after() -> None:
        async with drainpipe.Jobs(empty_db, {"emails": dict}) as jobs:
            [job] = await jobs.claim("emails", batch=10)  # the failed one is backing off
            assert job.payload == {"n": "for new"} and await jobs.complete(job)
            mine = await jobs.enqueue("emails", {"n": "new"})
            [again] = await jobs.claim("emails")
            assert again.id == mine and await jobs.complete(again)
        idem = drainpipe.Idempotency(empty_db)
        replay = await idem.begin("old-key", "fp")
        assert (replay.state, replay.status, replay.body) == ("replay", 201, b"made")
        await idem.db.close()

    asyncio.run(new_code_after())
    assert main(verify) == 0
    capsys.readouterr()


def test_the_contract_migrations_drop_release_0s_functions(empty_db: str, capsys: Any) -> None:
    """After the overlap: --contract drops the unversioned functions; the _v1 ones work on."""
    url = empty_db
    assert main(["sql", "apply", "--database-url", url, "--backend", "table"]) == 0
    assert main(["sql", "verify", "--database-url", url, "--contract"]) == 1
    assert "pending: jobs 0003_contract_drop_unversioned" in capsys.readouterr().out
    assert main(["sql", "apply", "--database-url", url, "--backend", "table", "--contract"]) == 0
    assert main(["sql", "verify", "--database-url", url, "--contract"]) == 0
    capsys.readouterr()

    async def check() -> None:
        async with await connect(url) as conn:
            for old in ("drainpipe.claim_jobs", "drainpipe.begin_idempotent"):
                row = await (await conn.execute("SELECT to_regproc(%s)", (old,))).fetchone()
                assert row == (None,), old
            with pytest.raises(psycopg.errors.UndefinedFunction):
                await conn.execute("SELECT * FROM drainpipe.claim_jobs('q', 30, 1)")
        async with drainpipe.Jobs(url, {"q": dict}) as jobs:
            await jobs.enqueue("q", {})
            [job] = await jobs.claim("q")
            assert await jobs.complete(job)

    asyncio.run(check())
