"""Each module's objects as a fresh install of its migrations leaves them, as SQL files.

The squash (tests/sql/squash.py) writes these files as the modules' baselines; the
current-schema check (tests/sql/current_schema.py) compares them with what is committed.
A module's objects are those its install added or changed, module by module in install
order; the agent inbox's (``agent_*``, and the fan-out trigger) belong to agent-inbox
whatever migration made them. The jobs module is split in parts: what every option
shares, what one storage adds, what one scheduler adds.
"""

from __future__ import annotations

import asyncio
import re

import psycopg

from drainpipe.sqlmodules import MODULES, install, sql_dir

from .catalog import Catalog, read, render, scratch_database

STORAGES = ("pgmq", "table")
SCHEDULERS = ("drain", "pg_cron")
OPTIONS = [(storage, scheduler) for storage in STORAGES for scheduler in SCHEDULERS]

# Superseded versions and helpers no kept function or client calls (step 2 checks).
# Their successors stay, with the names the client calls, whatever their version.
PRUNED_FUNCTIONS = frozenset(
    {
        "drainpipe.agent_raw_v1",  # agent_raw_v2
        "drainpipe.job_messages_policy_lease",  # the table claim and heartbeat check max_lease
        "drainpipe.audited_replay_job_v1",  # audited_replay_job_v2
        "drainpipe.drop_queue_policy_v1",  # no client drops a policy
        "drainpipe.ensure_queue_policy_v1",  # ensure_queue_policy_v3 (their bodies inline)
        "drainpipe.ensure_queue_policy_v2",
        "drainpipe.extend_webhook_v1",  # extend_webhooks_v1
        "drainpipe.fail_job_v1",  # fail_job_v2 (code HANDLER_ERROR, not discarded)
        "drainpipe.flow_gate",  # the claims take flow_budget_* and flow_room
        "drainpipe.flow_leased_hint",
        "drainpipe.keep_flow_leased",
        "drainpipe.job_queue_stats_v1",  # job_queue_stats_v4 (built on v2)
        "drainpipe.job_queue_stats_v3",
        "drainpipe.list_jobs_v1",  # list_jobs_v2
        "drainpipe.uncounted_list_jobs_1",  # list_jobs_v1's storage half
        "drainpipe.list_management_audit_v1",  # list_management_audit_v2
        "drainpipe.pgmq_enqueued_indexes",  # pgmq: list_jobs_v2 walks stamps
        "drainpipe.pgmq_records_newest_sql",
        "drainpipe.receive_webhook_v1",  # receive_webhook_v3
        "drainpipe.receive_webhook_v2",
        "drainpipe.replay_dead_job_v1",  # replay_dead_job_v3 (the client raises its refusals)
        "drainpipe.replay_dead_job_v2",
        "drainpipe.retry_dead_jobs_v1",  # retry_dead_jobs_v2 (the client counts its rows)
        "drainpipe_api.ensure_policy_v1",  # ensure_policy_v3
        "drainpipe_api.ensure_policy_v2",
        "drainpipe_api.list_jobs_v1",  # list_jobs_v2
        "drainpipe_api.replay_v1",  # replay_v3
        "drainpipe_api.replay_v2",
        "drainpipe_api.retry_dead_v1",  # retry_dead_v2
        "drainpipe_api.stats_v1",  # stats_v4
        "drainpipe_api.stats_v2",
        "drainpipe_api.stats_v3",
    }
)
PRUNED_TYPES = frozenset({"drainpipe.job_queue_stats_v1", "drainpipe.job_queue_stats_v3"})

AGENT_INBOX = re.compile(r"^(?:type |table |function |trigger )?drainpipe\.(?:\w+\.)?agent_")


def folder_name(module: str) -> str:
    return module.replace("-", "_")


def present_modules() -> list[str]:
    return [m for m in MODULES if (sql_dir() / "migrations" / folder_name(m)).is_dir()]


def _owner(module: str, key: str) -> str:
    if module == "webhook-inbox" and AGENT_INBOX.match(key):
        return "agent-inbox"
    return module


def _name(key: str) -> str:
    """``function drainpipe.f(a text)`` → ``drainpipe.f``."""
    return key.split(" ", 1)[1].split("(", 1)[0]


def pruned(key: str) -> bool:
    kind, _, rest = key.partition(" ")
    name = _name(key)
    if kind == "function":
        return name in PRUNED_FUNCTIONS
    if kind == "type":
        return name in PRUNED_TYPES
    if kind == "privileges":
        subject = rest.partition(" ")[2].split("(", 1)[0]
        return subject in PRUNED_FUNCTIONS
    return False


def by_module(url: str, storage: str, scheduler: str) -> dict[str, Catalog]:
    """Install the modules one by one; each module's objects are those its install added
    or changed (privileges are compared whole, in :func:`proof`)."""
    found: dict[str, Catalog] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        before: dict[str, str] = {}
        for module in present_modules():
            asyncio.run(
                install(url, module, backend=storage, scheduler=scheduler, contract=True)  # type: ignore[arg-type]
            )
            now = read(conn)
            snapshot = now.snapshot()
            for key, text in snapshot.items():
                if before.get(key) == text or key.startswith("privileges ") or pruned(key):
                    continue
                owner = found.setdefault(_owner(module, key), Catalog())
                _copy(now, owner, key)
            before = snapshot
    return found


def _copy(source: Catalog, target: Catalog, key: str) -> None:
    kind, _, name = key.partition(" ")
    if kind == "type":
        target.types[name] = source.types[name]
    elif kind == "table":
        target.tables[name] = source.tables[name]
    elif kind == "function":
        target.functions[name] = source.functions[name]
    elif kind == "trigger":
        target.triggers[name] = source.triggers[name]


def _keys(catalog: Catalog) -> dict[str, str]:
    return {k: v for k, v in catalog.snapshot().items() if not k.startswith("privileges ")}


def _subset(catalog: Catalog, keys: set[str]) -> Catalog:
    chosen = Catalog()
    for key in keys:
        _copy(catalog, chosen, key)
    return chosen


def split_jobs(per_option: dict[tuple[str, str], Catalog]) -> dict[str, Catalog]:
    """The jobs module's parts: what every option shares, then what one storage or one
    scheduler adds. An object that depends on both would need a part per pair: refused."""
    texts = {option: _keys(catalog) for option, catalog in per_option.items()}
    every = set.intersection(*(set(t) for t in texts.values()))
    common = {k for k in every if len({t[k] for t in texts.values()}) == 1}
    parts: dict[str, set[str]] = {"10_common": common}
    for storage in STORAGES:
        pair = [texts[(storage, s)] for s in SCHEDULERS]
        shared = set(pair[0]) & set(pair[1])
        parts[f"20_storage.{storage}"] = {
            k for k in shared - common if pair[0][k] == pair[1][k] and not _same_across(texts, k)
        }
    taken = set().union(*parts.values())
    for scheduler in SCHEDULERS:
        pair = [texts[(s, scheduler)] for s in STORAGES]
        shared = set(pair[0]) & set(pair[1])
        parts[f"30_schedules.{scheduler}"] = {k for k in shared - taken if pair[0][k] == pair[1][k]}
    for (storage, scheduler), text in texts.items():
        chosen = (
            parts["10_common"] | parts[f"20_storage.{storage}"] | parts[f"30_schedules.{scheduler}"]
        )
        if chosen != set(text):
            raise SystemExit(
                f"jobs ({storage}, {scheduler}): objects depending on the storage and the"
                f" scheduler at once: {sorted(set(text) ^ chosen)}"
            )
    return {name: _subset(per_option[_source(name)], keys) for name, keys in parts.items() if keys}


def _same_across(texts: dict[tuple[str, str], dict[str, str]], key: str) -> bool:
    """An object every storage makes alike (then it is no storage's)."""
    seen = {texts[(s, "drain")].get(key) for s in STORAGES}
    return len(seen) == 1 and None not in seen


def _source(part: str) -> tuple[str, str]:
    tag = part.partition(".")[2]
    if tag in STORAGES:
        return (tag, "drain")
    if tag in SCHEDULERS:
        return ("table", tag)
    return ("table", "drain")


# What a module runs besides its objects: a schema of its own, its privileges, a note.
BEFORE = {
    "rest-api": """CREATE SCHEMA IF NOT EXISTS drainpipe_api;
COMMENT ON SCHEMA drainpipe_api IS
    'drainpipe over PostgREST: expose this schema (Supabase: Data API settings → Exposed schemas)';
ALTER DEFAULT PRIVILEGES IN SCHEMA drainpipe_api REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;""",
}
AFTER = {
    "rest-api": """-- Privileges: the service role only
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM PUBLIC;
DO $privileges$
DECLARE
    api_role text;
BEGIN
    FOREACH api_role IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = api_role) THEN
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM %I', api_role);
            EXECUTE format('REVOKE ALL ON SCHEMA drainpipe_api FROM %I', api_role);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        GRANT USAGE ON SCHEMA drainpipe_api TO service_role;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA drainpipe_api TO service_role;
    END IF;
END
$privileges$;

-- PostgREST reads its schema cache once; tell a running one that the functions changed
NOTIFY pgrst, 'reload schema';""",
}
TITLES = {
    "jobs": "drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules",
    "idempotency": "drainpipe's idempotency module: idempotency keys and leases",
    "webhook-inbox": "drainpipe's webhook-inbox module: stored webhook messages and their processing",
    "agent-inbox": "drainpipe's agent-inbox module: inboxes fed by webhook sources, pulled by agents"
    " (needs webhook-inbox: its fan-out trigger sits on drainpipe.webhook_inbox)",
    "rest-api": "drainpipe's rest-api module: schema drainpipe_api, jobs and schedules for PostgREST."
    "\n-- Expose the schema to PostgREST: Supabase dashboard → Project Settings → Data API →"
    "\n-- Exposed schemas (add drainpipe_api), or in supabase/config.toml"
    "\n--     [api]"
    '\n--     schemas = ["public", "graphql_public", "drainpipe_api"]'
    "\n-- (a PostgREST of your own: db-schemas). Until then PostgREST answers PGRST106."
    "\n-- The bodies name drainpipe functions of the jobs module, bound when called",
}
PART_TITLES = {
    "10_common": "what both storages share",
    "20_storage.pgmq": "the pgmq storage (a pgmq queue per queue, functions made per queue)",
    "20_storage.table": "the table storage (every queue in drainpipe.job_messages)",
    "30_schedules.drain": "schedules run by drainpipe's drain (time zones kept)",
    "30_schedules.pg_cron": "schedules run by pg_cron",
}


BASELINE_NOTE = [
    "-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.",
    "-- Change it with a new migration, never here (sql/README.md).",
]
SCHEMA_NOTE = [
    "-- The current schema, for reading: what the baseline and the migrations after it leave.",
    "-- Generated by python -m tests.sql.current_schema --write (sql/README.md).",
]


def title(module: str, part: str | None, note: list[str]) -> list[str]:
    lines = [f"-- {TITLES[module]}."]
    if part:
        lines.append(f"-- This part: {PART_TITLES[part]}.")
    return lines + note


def read_options(server: str) -> dict[tuple[str, str], dict[str, Catalog]]:
    """Each option's modules, from a fresh install of the migrations sql/ holds."""
    found: dict[tuple[str, str], dict[str, Catalog]] = {}
    for storage, scheduler in OPTIONS:
        with scratch_database(server) as url:
            found[(storage, scheduler)] = by_module(url, storage, scheduler)
    return found


def module_files(
    per_option: dict[tuple[str, str], dict[str, Catalog]], note: list[str]
) -> dict[str, dict[str, str]]:
    """Per module, its files (``0001_baseline.sql``, or jobs' ``0001_baseline/<part>.sql``)
    and their text."""
    reference = per_option[("table", "drain")]
    files: dict[str, dict[str, str]] = {}
    for module in MODULES:
        if module == "jobs":
            parts = split_jobs({option: found["jobs"] for option, found in per_option.items()})
            files[module] = {
                f"0001_baseline/{part}.sql": render(catalog, title=title(module, part, note))
                for part, catalog in parts.items()
            }
            continue
        texts = {_keys_text(found.get(module, Catalog())) for found in per_option.values()}
        if len(texts) != 1:
            raise SystemExit(f"{module} differs between backends or schedulers")
        text = render(
            reference.get(module, Catalog()),
            title=title(module, None, note),
            before=BEFORE.get(module, ""),
            after=AFTER.get(module, ""),
        )
        files[module] = {"0001_baseline.sql": text}
    return files


def _keys_text(catalog: Catalog) -> str:
    return repr(sorted(_keys(catalog).items()))
