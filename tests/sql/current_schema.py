"""The current schema: what a fresh install from the migrations leaves, per module.

While a module has no migration after its baseline, the baseline IS its current schema:
``sql/migrations/<module>/0001_baseline`` is what a reader opens, and it must be exactly
what the catalog of a fresh install gives back (the same rendering the squash wrote).
Once migrations follow it, ``sql/schema/<module>.sql`` (jobs: ``jobs.<part>.sql``) holds
the schema they leave, generated from a fresh install's catalog and checked the same way;
it disappears again when the module is squashed. tests/sql/test_current_schema.py fails
when a file differs from a fresh install::

    python -m tests.sql.current_schema --write      # rewrite sql/schema/
"""

from __future__ import annotations

import argparse
import sys

from drainpipe.sqlmodules import MODULES, migrations, sql_dir

from .baseline import BASELINE_NOTE, SCHEMA_NOTE, folder_name, module_files, read_options

SCHEMA_DIR = sql_dir() / "schema"


def schema_name(module: str, baseline_name: str) -> str:
    """``jobs``, ``0001_baseline/10_common.sql`` → ``jobs.10_common.sql``."""
    stem = baseline_name.removeprefix("0001_baseline").strip("/").removesuffix(".sql")
    return f"{folder_name(module)}{'.' + stem if stem else ''}.sql"


def expected_files(server: str) -> dict[str, str]:
    """Path (relative to sql/) → text: the baselines of modules with nothing after them,
    the sql/schema/ files of the others."""
    per_option = read_options(server)
    as_baseline = module_files(per_option, BASELINE_NOTE)
    as_schema = module_files(per_option, SCHEMA_NOTE)
    files: dict[str, str] = {}
    for module in MODULES:
        if len(migrations(module)) == 1:
            for name, text in as_baseline[module].items():
                files[f"migrations/{folder_name(module)}/{name}"] = text
        else:
            for name, text in as_schema[module].items():
                files[f"schema/{schema_name(module, name)}"] = text
    return files


def committed_files() -> dict[str, str]:
    """The baselines of modules with nothing after them, and sql/schema/."""
    files = {
        f"schema/{path.name}": path.read_text(encoding="utf-8")
        for path in (SCHEMA_DIR.glob("*.sql") if SCHEMA_DIR.is_dir() else ())
    }
    for module in MODULES:
        [first, *later] = migrations(module)
        if not later:
            for part in first.parts:
                files[part.relative_to(sql_dir()).as_posix()] = part.read_text(encoding="utf-8")
    return files


def differences(server: str) -> list[str]:
    expected, committed = expected_files(server), committed_files()
    return sorted(
        name
        for name in expected.keys() | committed.keys()
        if expected.get(name) != committed.get(name)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--write", action="store_true", help="rewrite sql/schema/")
    args = parser.parse_args(argv)
    if not args.write:
        stale = differences(args.server)
        for name in stale:
            print(f"differs from a fresh install: sql/{name}")
        return 1 if stale else 0
    expected = expected_files(args.server)
    for path in SCHEMA_DIR.glob("*.sql") if SCHEMA_DIR.is_dir() else ():
        if f"schema/{path.name}" not in expected:
            path.unlink()
    written = 0
    for name, text in expected.items():
        if name.startswith("schema/"):
            SCHEMA_DIR.mkdir(exist_ok=True)
            (sql_dir() / name).write_text(text, encoding="utf-8")
            written += 1
    if SCHEMA_DIR.is_dir() and not any(SCHEMA_DIR.iterdir()):
        SCHEMA_DIR.rmdir()
    stale = [name for name in differences(args.server) if name.startswith("migrations/")]
    for name in stale:
        print(f"a baseline differs from a fresh install (squash again): sql/{name}")
    print(f"wrote {written} files to sql/schema/")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
