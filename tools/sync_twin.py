"""Writes the generated modules of ``drainpipe.sync`` from their async sources.

    python tools/sync_twin.py           # rewrite every generated module
    python tools/sync_twin.py --check   # exit 1 and name the modules regenerating would change

The async code is the truth; its sync twin is the same code with ``async``/``await`` taken
out and a few names swapped (:data:`NAMES`, :data:`IMPORTS`), then sorted and formatted by
ruff with the project's settings, so a committed twin equals what this writes.

Why not the ``unasync`` package: it maps a directory onto another directory under the same
file names and swaps single name tokens. The twins here live in one package under other
names (``idempotency/store.py`` -> ``sync/idempotency_store.py``), their relative imports
must be re-rooted from the new place, an import can move a name to another module
(``drainpipe.db.Database`` -> ``drainpipe.db.sync.SyncDatabase``), and ``Awaitable[T]``
becomes ``T``. Those four rules are short to write over the ``tokenize`` and ``ast``
modules and hard to bolt onto unasync.
"""

from __future__ import annotations

import argparse
import ast
import functools
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib"
COMMAND = "./scripts/sync-twin"

#: async source -> generated sync twin, as module paths under lib/. The one place that
#: names where each lives: a module that moves changes its row here, then the script runs.
TWINS: dict[str, str] = {
    "drainpipe/leases/__init__.py": "drainpipe/sync/leases.py",
    "drainpipe/idempotency/store.py": "drainpipe/sync/idempotency_store.py",
    "drainpipe/webhooks/store.py": "drainpipe/sync/inbox_store.py",
    "drainpipe/webhooks/source.py": "drainpipe/sync/inbox_source.py",
    "drainpipe/agents/store.py": "drainpipe/sync/agents_store.py",
    "drainpipe/agents/reads.py": "drainpipe/sync/agents_reads.py",
    "drainpipe/agents/peeks.py": "drainpipe/sync/agents_peeks.py",
    "drainpipe/console/client.py": "drainpipe/sync/management.py",
    "drainpipe/backends/sql.py": "drainpipe/sync/backend.py",
    "drainpipe/backends/sql_enqueue.py": "drainpipe/sync/backend_enqueue.py",
    "drainpipe/backends/sql_leases.py": "drainpipe/sync/backend_leases.py",
    "drainpipe/schedules/service.py": "drainpipe/sync/schedules.py",
    "drainpipe/jobs/record_calls.py": "drainpipe/sync/records.py",
    "drainpipe/jobs/pause_calls.py": "drainpipe/sync/pause.py",
    "drainpipe/jobs/replay_calls.py": "drainpipe/sync/replays.py",
    "drainpipe/jobs/archive.py": "drainpipe/sync/archive.py",
    "drainpipe/jobs/events.py": "drainpipe/sync/events.py",
    "drainpipe/jobs/guard.py": "drainpipe/sync/policies.py",
    "drainpipe/jobs/enqueue_calls.py": "drainpipe/sync/enqueue.py",
}

#: twinned sources that hold a feature's statements beside the calls that run them: their
#: plain top-level functions, constants and classes without async code (the statements,
#: their parameters, the reading of their rows, what they answer; no I/O) are imported by
#: the twin from the source, not copied, so both executors run one copy of the SQL and its
#: parsing, and answer the same classes
SHARES_STATEMENTS: frozenset[str] = frozenset(
    {
        "drainpipe/backends/sql_enqueue.py",
        "drainpipe/backends/sql_leases.py",
        "drainpipe/agents/store.py",
        "drainpipe/agents/reads.py",
    }
)

#: name tokens renamed in code (strings and comments are left alone)
NAMES: dict[str, str] = {
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "aclose": "close",
    # httpx's async client and transport -> its sync ones
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    # the jobs storage: the sync twin of the SQL backend
    "SqlQueueBackend": "SyncSqlBackend",
    "SqlEnqueue": "SyncSqlEnqueue",
    "SqlLeases": "SyncSqlLeases",
    # the mixins of sync.Jobs are named apart from the async ones they are generated from
    "ScheduleMixin": "SyncScheduleMixin",
    "RecordsMixin": "SyncRecordsMixin",
    "PauseMixin": "SyncPauseMixin",
    "ReplaysMixin": "SyncReplaysMixin",
    "ArchiveMixin": "SyncArchiveMixin",
    "EventsMixin": "SyncEventsMixin",
    "PolicyMixin": "SyncPolicyMixin",
    "EnqueueMixin": "SyncEnqueueMixin",
}

#: (module, name) imported by an async source -> where its sync twin imports it from, and
#: under which name; None drops the import (the name is unwrapped or unused once sync)
IMPORTS: dict[tuple[str, str], tuple[str, str] | None] = {
    ("drainpipe.db", "Database"): ("drainpipe.db.sync", "SyncDatabase"),
    ("drainpipe.db", "as_database"): ("drainpipe.db.sync", "as_sync_database"),
    ("contextlib", "asynccontextmanager"): ("contextlib", "contextmanager"),
    ("collections.abc", "AsyncIterator"): ("collections.abc", "Iterator"),
    ("collections.abc", "AsyncIterable"): ("collections.abc", "Iterable"),
    ("collections.abc", "AsyncGenerator"): ("collections.abc", "Generator"),
    # the sync twin's one storage is the complete SQL driver (its backend and its driver)
    ("drainpipe.backends", "QueueBackend"): ("drainpipe.sync.backend", "SyncSqlBackend"),
    ("drainpipe.backends.driver", "Driver"): ("drainpipe.sync.backend", "SyncSqlBackend"),
    # an application's function answering an awaitable: awaited there, refused here
    ("drainpipe.awaiting", "settled"): ("drainpipe.sync.awaiting", "settled"),
    ("collections.abc", "Awaitable"): None,
    ("typing", "Awaitable"): None,
}

# a name an import renames is renamed where the code uses it too
NAMES.update(
    {name: new[1] for (_, name), new in IMPORTS.items() if new is not None and new[1] != name}
)

#: ``module.attribute`` calls with another module's in sync code: (module to import, text)
CALLS: dict[str, tuple[str, str]] = {
    "asyncio.sleep": ("time", "time.sleep"),
}

#: generic types whose sync twin is their argument: ``Awaitable[T]`` -> ``T``
UNWRAPPED = frozenset({"Awaitable"})

#: in docstrings, the examples lose their async words too
_DOC_WORDS = re.compile(r"\bawait (?=\S)|\basync (?=def |with |for )")

#: a suppression comment of flake8-async rules only (``noqa: ASYNC109``): sync code needs none
_ASYNC_NOQA = re.compile(r"#\s*noqa:\s*ASYNC\d+(\s*,\s*ASYNC\d+)*\b.*$")


@dataclass(frozen=True)
class Twin:
    source: Path
    target: Path
    text: str


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: str) -> str:
    return ".".join(path.split("/")[:-1])


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of ours (``from pkg import submodule``)."""
    path = LIB.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _relative(module: str, package: str) -> str:
    """``module`` as seen from ``package``: relative inside drainpipe, absolute outside."""
    if module.split(".")[0] != package.split(".")[0]:
        return module
    mine, theirs = package.split("."), module.split(".")
    common = 0
    while common < min(len(mine), len(theirs)) and mine[common] == theirs[common]:
        common += 1
    return "." * (len(mine) - common + 1) + ".".join(theirs[common:])


def _rewrite_import(node: ast.ImportFrom, source_package: str, target_package: str) -> str:
    module = _absolute(node.module, node.level, source_package)
    moved_modules = {module_name(a): module_name(s) for a, s in TWINS.items()}
    groups: dict[str, list[str]] = {}
    for alias in node.names:
        destination: tuple[str, str] | None = (module, alias.name)
        if (module, alias.name) in IMPORTS:
            destination = IMPORTS[(module, alias.name)]
        elif (
            module in moved_modules
            and not _is_module(f"{module}.{alias.name}")
            and alias.name not in _shared_names(module)
        ):
            # a name of the twinned module moves with it; a submodule of a twinned package
            # (``from . import statements`` in a package's __init__) stays where it is, and
            # so does a statement its twin imports from it (:data:`SHARES_STATEMENTS`)
            destination = (moved_modules[module], alias.name)
        if destination is None:
            continue
        new_module, new_name = destination
        as_name = alias.asname
        if as_name is not None and as_name == alias.name:
            as_name = new_name  # ``X as X`` (a re-export) stays one under the new name
        groups.setdefault(new_module, []).append(
            new_name if as_name is None else f"{new_name} as {as_name}"
        )
    indent = " " * node.col_offset
    lines = [
        f"{indent}from {_relative(m, target_package)} import {', '.join(names)}"
        for m, names in groups.items()
    ]
    return "\n".join(lines) if lines else f"{indent}pass" if node.col_offset else ""


def _replace_imports(text: str, source: str, target: str) -> str:
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = [
        (node.lineno, node.end_lineno or node.lineno, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    ]
    for first, last, node in sorted(edits, key=lambda e: e[0], reverse=True):
        new = _rewrite_import(node, package_of(source), package_of(target))
        lines[first - 1 : last] = [new + "\n"] if new else []
    return "".join(lines)


def _has_async(node: ast.AST) -> bool:
    return any(
        isinstance(inner, ast.AsyncFunctionDef | ast.Await | ast.AsyncFor | ast.AsyncWith)
        for inner in ast.walk(node)
    )


def _plain_definitions(tree: ast.Module) -> list[tuple[int, int, list[str]]]:
    """``(first line, last line, names)`` of each top-level plain function, constant and class
    without async code (with the comment lines above it and the docstring below it); not
    ``__all__``."""
    found: list[tuple[int, int, list[str]]] = []
    body = tree.body
    for index, node in enumerate(body):
        names: list[str] = []
        if isinstance(node, ast.FunctionDef) or (
            isinstance(node, ast.ClassDef) and not _has_async(node)
        ):
            names = [node.name]
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            names = [node.target.id]
        if not names or "__all__" in names:
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        last = node.end_lineno or node.lineno
        after = body[index + 1] if index + 1 < len(body) else None
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            last = after.end_lineno or after.lineno  # an attribute's docstring goes with it
        found.append((first, last, names))
    return found


def _without_empty_sections(lines: list[str]) -> list[str]:
    """``lines`` without the section rules (``# -- claim ---``) left with nothing under
    them: the next line that is not blank is another rule, or there is none."""
    kept: list[str] = []
    for index, line in enumerate(lines):
        if line.startswith(_SECTION):
            following = next((x for x in lines[index + 1 :] if x.strip()), _SECTION)
            if following.startswith(_SECTION):
                continue
        kept.append(line)
    return kept


_SECTION = "# -- "


@functools.cache
def _shared_names(module: str) -> frozenset[str]:
    """The plain definitions of a :data:`SHARES_STATEMENTS` module (none for another)."""
    path = next((p for p in SHARES_STATEMENTS if module_name(p) == module), None)
    if path is None:
        return frozenset()
    tree = ast.parse((LIB / path).read_text())
    return frozenset(name for _, _, names in _plain_definitions(tree) for name in names)


def _import_statements(text: str, source: str, target: str) -> str:
    """``text`` with its plain top-level definitions replaced by one import of them from
    the source (:data:`SHARES_STATEMENTS`); ruff drops the names the twin does not use."""
    lines = text.splitlines(keepends=True)
    shared: list[str] = []
    for first, last, names in sorted(_plain_definitions(ast.parse(text)), reverse=True):
        while first > 1 and lines[first - 2].lstrip().startswith("#"):
            first -= 1  # the comment that says what the definition is goes with it
        del lines[first - 1 : last]
        shared = names + shared
    text = "".join(_without_empty_sections(lines))
    if not shared:
        return text
    origin = _relative(module_name(source), package_of(target))
    return _with_line(text, f"from {origin} import {', '.join(shared)}\n")


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _unasync_tokens(text: str) -> tuple[str, set[str]]:
    """``text`` without ``async``/``await``, with :data:`NAMES`, :data:`CALLS` and
    :data:`UNWRAPPED` applied; also the modules the swapped calls need imported."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    starts = _offsets(text)

    def at(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []
    needed: set[str] = set()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.type == tokenize.NAME and token.string in ("async", "await"):
            # the keyword and the space after it: ``print(await x)`` -> ``print(x)``
            end = at(following.start) if following is not None else at(token.end)
            edits.append((at(token.start), end, ""))
        elif token.type == tokenize.NAME and token.string in UNWRAPPED and _opens(tokens, index):
            close = _matching(tokens, index + 1)
            edits.append((at(token.start), at(tokens[index + 1].end), ""))
            edits.append((at(tokens[close].start), at(tokens[close].end), ""))
        elif token.type == tokenize.NAME and token.string in NAMES:
            edits.append((at(token.start), at(token.end), NAMES[token.string]))
        elif token.type == tokenize.NAME and index + 2 < len(tokens):
            dotted = f"{token.string}.{tokens[index + 2].string}"
            if following is not None and following.string == "." and dotted in CALLS:
                module, replacement = CALLS[dotted]
                needed.add(module)
                edits.append((at(token.start), at(tokens[index + 2].end), replacement))
                index += 2
        elif token.type == tokenize.STRING and token.string[1:-1] in NAMES:
            # a renamed name as a string (an ``__all__`` entry) is renamed too
            quote = token.string[0]
            renamed = f"{quote}{NAMES[token.string[1:-1]]}{quote}"
            edits.append((at(token.start), at(token.end), renamed))
        elif token.type == tokenize.STRING and _DOC_WORDS.search(token.string):
            edits.append((at(token.start), at(token.end), _DOC_WORDS.sub("", token.string)))
        elif token.type == tokenize.COMMENT and _ASYNC_NOQA.match(token.string):
            # the comment and the spaces before it go
            start = at(token.start)
            while start > 0 and text[start - 1] == " ":
                start -= 1
            edits.append((start, at(token.end), ""))
        index += 1
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text, needed


def _opens(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    return index + 1 < len(tokens) and tokens[index + 1].string == "["


def _matching(tokens: list[tokenize.TokenInfo], opening: int) -> int:
    depth = 0
    for index in range(opening, len(tokens)):
        if tokens[index].string == "[":
            depth += 1
        elif tokens[index].string == "]":
            depth -= 1
            if depth == 0:
                return index
    raise ValueError(f"unbalanced [ at line {tokens[opening].start[0]}")


def _with_imports(text: str, modules: set[str]) -> str:
    """``import time`` and the like after ``from __future__ import annotations``."""
    if not modules:
        return text
    return _with_line(text, "".join(f"import {m}\n" for m in sorted(modules)))


def _with_line(text: str, added: str) -> str:
    """``added`` (import lines) after ``from __future__ import annotations``."""
    anchor = "from __future__ import annotations\n"
    if anchor not in text:
        raise ValueError("a twinned source must start with `from __future__ import annotations`")
    return text.replace(anchor, anchor + "\n" + added, 1)


def _header(source: str) -> str:
    return (
        f"# generated from lib/{source} by {COMMAND}: do not edit.\n"
        f"# Change the async source (or tools/sync_twin.py) and run {COMMAND} again.\n"
    )


def _ruff(text: str, target: str) -> str:
    """``text`` with its imports sorted and pruned and formatted, as the project's ruff
    settings would leave the file at ``target`` (the path picks pyproject.toml's config).
    ``async for x in y: yield x`` (an async generator cannot ``yield from``) becomes
    ``yield from y`` (UP028: unsafe only for a caller's ``send``/``throw``, which none uses),
    and an ``__all__`` with a renamed name is sorted again (RUF022)."""
    name = str(LIB / target)
    for command in (
        [
            "check",
            "--fix",
            "--unsafe-fixes",
            "--select",
            "I,F401,UP028,RUF022",
            "--quiet",
            "--exit-zero",
        ],
        ["format", "--quiet"],
    ):
        text = subprocess.run(  # noqa: S603 (a fixed command: this interpreter's ruff)
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", name, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def generate(source: str, target: str) -> str:
    """The sync twin of ``lib/<source>`` as it is written to ``lib/<target>``."""
    text = (LIB / source).read_text()
    text = _replace_imports(text, source, target)
    if source in SHARES_STATEMENTS:
        text = _import_statements(text, source, target)
    text, modules = _unasync_tokens(text)
    text = _with_imports(text, modules)
    return _ruff(_header(source) + text, target)


def twins() -> list[Twin]:
    return [Twin(LIB / s, LIB / t, generate(s, t)) for s, t in TWINS.items()]


def stale() -> list[str]:
    """The generated modules whose committed text differs from what this would write."""
    return [
        str(twin.target.relative_to(ROOT))
        for twin in twins()
        if not twin.target.exists() or twin.target.read_text() != twin.text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    options = parser.parse_args(argv)
    if options.check:
        changed = stale()
        for path in changed:
            print(f"stale: {path} (run {COMMAND})")
        return 1 if changed else 0
    for twin in twins():
        if not twin.target.exists() or twin.target.read_text() != twin.text:
            twin.target.write_text(twin.text)
            print(f"wrote {twin.target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
