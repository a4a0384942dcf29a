"""Squash each SQL module's migrations into one baseline migration.

    python -m tests.sql.squash [--server postgresql://postgres@127.0.0.1:5432/postgres]

1. Applies the migrations as they are, module by module, into scratch databases (each
   backend with each scheduler, every contract migration included) and reads the objects
   each module added from the catalog (tests/sql/catalog.py).
2. Leaves out the functions and row types nothing calls any more (``PRUNED_*``), after
   checking that no kept function and no client code (lib/, functions/, api/) names them.
3. Files the agent inbox's objects (``agent_*``, and the fan-out trigger) under the
   agent-inbox module, whatever migration made them.
4. Writes ``sql/migrations/<module>/0001_baseline`` in place of the old migrations: one
   file, or for jobs a common part, a part per storage and a part per scheduler; removes
   sql/schema/ (tests/sql/current_schema.py: the baseline is the schema now).
5. Applies the baseline to fresh scratch databases and compares their catalogs with step
   1's minus what was left out on purpose, privileges included; exits 1 on a difference.

Re-run it after merging migrations written against the old history: it reads whatever
migrations ``sql/`` holds (a baseline plus later ones squashes again).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import psycopg

from drainpipe import sqlmodules
from drainpipe.sqlmodules import install, sql_dir

from .baseline import (
    BASELINE_NOTE,
    OPTIONS,
    PRUNED_FUNCTIONS,
    PRUNED_TYPES,
    folder_name,
    module_files,
    present_modules,
    pruned,
    read_options,
)
from .catalog import Catalog, compact_function, read, scratch_database

ROOT = Path(__file__).resolve().parents[2]
CLIENT_CODE = ("lib", "functions", "api")


def check_pruned(kept: Iterable[Catalog]) -> None:
    """Nothing kept may name a left-out function or type: not a function body, not the client."""
    texts = [
        text
        for catalog in kept
        for text in [*catalog.functions.values(), *catalog.triggers.values()]
    ]
    for folder in CLIENT_CODE:
        texts += [path.read_text(encoding="utf-8") for path in (ROOT / folder).rglob("*.py")]
    blob = "\n".join(texts)
    for name in sorted(PRUNED_FUNCTIONS | PRUNED_TYPES):
        short = name.split(".", 1)[1]
        # a mention in a comment is prose; a call is the name followed by "(" or a cast
        if re.search(rf"\b{short}\b\s*\(|::{re.escape(name)}\b", blob):
            raise SystemExit(f"{name} is still called: take it out of PRUNED_*")


def write(files: dict[str, dict[str, str]]) -> list[Path]:
    """Replace each module's migrations with its baseline files; sql/schema/ goes (the
    baselines are the current schema until a migration follows them)."""
    shutil.rmtree(sql_dir() / "schema", ignore_errors=True)
    written: list[Path] = []
    for module, texts in files.items():
        folder = sql_dir() / "migrations" / folder_name(module)
        if folder.exists():
            shutil.rmtree(folder)
        for name, text in texts.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def whole(url: str) -> dict[str, str]:
    """Every object of the database, functions as the baseline writes them (whitespace)."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = read(conn).snapshot()
    return {
        key: compact_function(text) if key.startswith("function ") else text
        for key, text in found.items()
    }


def installed(server: str, storage: str, scheduler: str) -> dict[str, str]:
    """:func:`whole` of a fresh install of every module with these options."""
    with scratch_database(server) as url:
        asyncio.run(
            install(url, present_modules(), backend=storage, scheduler=scheduler, contract=True)  # type: ignore[arg-type]
        )
        return whole(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    before = {option: installed(args.server, *option) for option in OPTIONS}
    per_option = read_options(args.server)
    check_pruned(catalog for found in per_option.values() for catalog in found.values())
    written = write(module_files(per_option, BASELINE_NOTE))
    for path in written:
        print(f"wrote {path.relative_to(ROOT)} ({len(path.read_text().splitlines())} lines)")
    # step 5: the baseline against the history it replaces
    sqlmodules.migrations.cache_clear()
    problems = []
    for option in OPTIONS:
        expected = {k: v for k, v in before[option].items() if not pruned(k)}
        after = installed(args.server, *option)
        problems += [
            f"{option[0]}/{option[1]}: {key}"
            for key in sorted(expected.keys() | after.keys())
            if expected.get(key) != after.get(key)
        ]
    for problem in problems:
        print(f"differs from the squashed migrations: {problem}", file=sys.stderr)
    print("the baseline installs exactly what the migrations did" if not problems else "")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
