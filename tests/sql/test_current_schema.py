"""sql/schema/ shows what the migrations install today (tests/sql/current_schema.py)."""

from __future__ import annotations

from .current_schema import SCHEMA_DIR, expected_files


def test_the_schema_files_are_what_a_fresh_install_leaves(server_dsn: str) -> None:
    expected = expected_files(server_dsn)
    committed = {path.name: path.read_text() for path in SCHEMA_DIR.glob("*.sql")}
    stale = sorted(
        name
        for name in expected.keys() | committed.keys()
        if expected.get(name) != committed.get(name)
    )
    assert not stale, f"regenerate with ./scripts/schema: {stale} differ from a fresh install"


def test_every_module_has_a_schema_file() -> None:
    stems = {path.name.split(".")[0] for path in SCHEMA_DIR.glob("*.sql")}
    assert stems == {"jobs", "idempotency", "webhook_inbox", "rest_api"}
