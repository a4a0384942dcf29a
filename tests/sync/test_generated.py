"""The generated modules of ``drainpipe.sync`` are what ``./scripts/sync-twin`` writes from
their async sources today: a change to an async source that was not regenerated (or a hand
edit of a generated module) fails here, and so in CI."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_twin", ROOT / "tools" / "sync_twin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_twin", module)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


@pytest.mark.parametrize("source", sorted(GENERATOR.TWINS))
def test_the_committed_twin_is_what_the_generator_writes(source: str) -> None:
    target = GENERATOR.TWINS[source]
    committed = (ROOT / "lib" / target).read_text()
    assert committed == GENERATOR.generate(source, target), (
        f"lib/{target} differs from what ./scripts/sync-twin writes from lib/{source}: "
        "run ./scripts/sync-twin and commit the result (never edit a generated module)"
    )


def test_a_generated_module_says_so_and_names_its_source() -> None:
    for source, target in GENERATOR.TWINS.items():
        first = (ROOT / "lib" / target).read_text().splitlines()[0]
        assert first == f"# generated from lib/{source} by ./scripts/sync-twin: do not edit."


def test_the_generator_takes_the_async_words_out() -> None:
    source = (
        "async def f(x: Callable[[], Awaitable[int]]) -> AsyncIterator[int]:\n"
        "    async with lock:\n"
        "        await asyncio.sleep(1)\n"
        "        async for item in g():\n"
        '            yield (await x())  # "await" in a comment stays\n'
    )
    text, modules = GENERATOR._unasync_tokens(source)
    assert text == (
        "def f(x: Callable[[], int]) -> Iterator[int]:\n"
        "    with lock:\n"
        "        time.sleep(1)\n"
        "        for item in g():\n"
        '            yield (x())  # "await" in a comment stays\n'
    )
    assert modules == {"time"}


def test_relative_imports_are_rerooted_at_the_twin() -> None:
    assert GENERATOR._relative("drainpipe.db.sync", "drainpipe.sync") == "..db.sync"
    assert GENERATOR._relative("drainpipe.sync.inbox_store", "drainpipe.sync") == ".inbox_store"
    assert GENERATOR._relative("drainpipe.statements", "drainpipe.sync") == "..statements"
    assert GENERATOR._relative("collections.abc", "drainpipe.sync") == "collections.abc"


def _table_modules(heading: str) -> set[str]:
    """The ``sync/*.py`` modules named in the first column of a table of docs/sync.md's
    section ``heading`` (the table that follows the line starting with ``| heading``)."""
    text = (ROOT / "docs" / "sync.md").read_text()
    section = text.split("## Generated from the async code", 1)[1].split("\n## ", 1)[0]
    rows = section.split(f"| {heading} |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {
        f"sync/{name}"
        for row in rows
        for name in re.findall(r"`(?:sync/)?(\w+\.py)`", row.split("|")[1])
    }


def test_the_docs_name_every_generated_and_every_hand_written_module() -> None:
    generated = {target.removeprefix("drainpipe/") for target in GENERATOR.TWINS.values()}
    assert _table_modules("generated") == generated
    every = {
        path.relative_to(ROOT / "lib" / "drainpipe").as_posix()
        for path in (ROOT / "lib" / "drainpipe" / "sync").glob("*.py")
    }
    assert _table_modules("hand-written") == every - generated


def test_a_renamed_name_is_renamed_in_all_and_an_async_only_noqa_goes() -> None:
    source = (
        '__all__ = ["SqlQueueBackend"]\n'
        "def f(timeout: float,  # noqa: ASYNC109 - a stored deadline\n"
        "      x: int) -> None: ...\n"
    )
    text, _ = GENERATOR._unasync_tokens(source)
    assert text == (
        '__all__ = ["SyncSqlBackend"]\ndef f(timeout: float,\n      x: int) -> None: ...\n'
    )


def test_a_source_with_its_statements_is_twinned_without_copying_them() -> None:
    source = (
        '"""Doc."""\n\nfrom __future__ import annotations\n\n'
        "# -- claim ---\n\n"
        "#: the claim\n"
        'CLAIM = "SELECT drainpipe.claim_v1(%s)"\n'
        '"""What it answers."""\n\n\n'
        "def claim_params(queue: str) -> tuple[str]:\n    return (queue,)\n\n\n"
        "# -- the calls ---\n\n\n"
        "class Calls:\n"
        "    async def read(self, queue: str) -> object:\n"
        "        return await self.db.fetch(CLAIM, claim_params(queue))\n"
    )
    text = GENERATOR._import_statements(
        source, "drainpipe/backends/sql_leases.py", "drainpipe/sync/backend_leases.py"
    )
    assert "from ..backends.sql_leases import CLAIM, claim_params\n" in text
    assert "SELECT" not in text and "def claim_params" not in text and "# -- claim" not in text
    assert "# -- the calls ---" in text and "class Calls:" in text
    for shared in GENERATOR.SHARES_STATEMENTS:  # and the committed twins hold no statement
        assert "SELECT " not in (ROOT / "lib" / GENERATOR.TWINS[shared]).read_text()
