"""A reader sees today's schema in one place per module: the baseline while no migration
follows it, else sql/schema/ (tests/sql/current_schema.py), and either is exactly what a
fresh install of the migrations leaves."""

from __future__ import annotations

from drainpipe.sqlmodules import MODULES, migrations

from .current_schema import SCHEMA_DIR, differences, schema_name


def test_the_current_schema_is_what_a_fresh_install_leaves(server_dsn: str) -> None:
    stale = differences(server_dsn)
    assert not stale, (
        f"{stale} differ from a fresh install: python -m tests.sql.current_schema --write"
        " (a baseline that differs: python -m tests.sql.squash)"
    )


def test_every_module_starts_from_a_baseline_and_shows_its_schema_once() -> None:
    schema_files = (
        {path.name for path in SCHEMA_DIR.glob("*.sql")} if SCHEMA_DIR.is_dir() else set()
    )
    for module in MODULES:
        [first, *later] = migrations(module)
        assert (first.version, first.name) == (1, "baseline"), module
        names = {
            schema_name(
                module,
                part.relative_to(
                    part.parents[1 if part.parent.name == "0001_baseline" else 0]
                ).as_posix(),
            )
            for part in first.parts
        }
        # the schema is the baseline until a migration follows it; then sql/schema/ shows it
        assert (names <= schema_files) == bool(later), module
