"""Move drainpipe's modules into packages by feature and rewrite every reference to them.

    python tools/relayout.py            # move, rewrite, then ruff (imports sorted, formatted)
    python tools/relayout.py --check    # only say what would change; exit 1 when anything would

The layout is the table below (``FILE_MOVES``, ``DIR_MOVES``): each feature package (jobs,
schedules, webhooks, idempotency, leases, console, agents) holds its async API, its
statements and its HTTP app; the statements that the job storages run sit with the drivers
(``backends/``), below the features, because ``jobs`` imports the backends (see
docs/architecture.md). The script:

1. ``git mv``s every file the table names (and every file under a moved directory, so a file
   another branch added there later follows its package);
2. rewrites imports (absolute and relative, also inside functions and ``TYPE_CHECKING``
   blocks) in lib/, tests/, bench/, functions/, api/, examples/ and tools/, by reading them
   with ``ast``: a file moved in this run is read as it was written, relative to its old
   place; a name imported from a package that no longer exists (``drainpipe.drain``) goes
   to the module that now holds it (``SYMBOL_HOMES``);
3. rewrites dotted module names (``drainpipe.inbox.service``) and file paths
   (``lib/drainpipe/inbox/service.py``, ``inbox/service.py``) in code, docs and configs.
   A bare package name is left alone in prose and strings: ``drainpipe.inbox`` is also the
   name of a logger, and loggers keep their names.

It is idempotent: an old name never names a module of the new layout, so a second run
finds nothing to do, and after a merge it moves and rewrites only what arrived under the
old names.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "drainpipe"
#: where imports and names are rewritten (Python files)
CODE_DIRS = ("lib", "tests", "bench", "functions", "api", "examples", "tools")
#: where module paths and names are rewritten in text
TEXT_FILES = ("docs/*.md", "docs/**/*.md", "pyproject.toml", ".ci/*", "scripts/**/*")

#: (old, new) paths of files under lib/drainpipe, applied before ``DIR_MOVES``
FILE_MOVES: tuple[tuple[str, str], ...] = (
    # the statements the job storages run: with the drivers, below the features
    ("ops/jobs.py", "backends/job_statements.py"),
    ("ops/records.py", "backends/record_statements.py"),
    ("ops/pause.py", "backends/pause_statements.py"),
    ("ops/schedules.py", "backends/schedule_statements.py"),
    ("ops/policies.py", "backends/policy_statements.py"),
    ("ops/steps.py", "backends/step_statements.py"),
    # the shapes every statement speaks, in the core
    ("ops/_types.py", "db/statement_shapes.py"),
    # every statement, for checks and tools (above the features, imported by nobody)
    ("ops/__init__.py", "statements.py"),
    # each feature's own statements, in its package
    ("ops/idempotency.py", "idempotency/statements.py"),
    ("ops/inbox.py", "webhooks/statements.py"),
    ("ops/agents.py", "agents/statements.py"),
    ("ops/console.py", "console/console_statements.py"),
    ("ops/management.py", "console/management_statements.py"),
    ("ops/leases.py", "leases/statements.py"),
    ("leases.py", "leases/__init__.py"),
    ("lease_rules.py", "leases/lease_rules.py"),
    # the drain route belongs to the jobs (Jobs.drain_route builds it)
    ("drain/route.py", "jobs/drain_route.py"),
    ("drain/unavailable.py", "jobs/drain_unavailable.py"),
    ("drain/tokens.py", "jobs/drain_tokens.py"),
    ("drain/dev_drain.py", "jobs/dev_drain.py"),
    ("drain/__init__.py", ""),  # dissolved: its names are in SYMBOL_HOMES
    # one name per thing: "rules" alone said nothing
    ("jobs/rules.py", "jobs/job_rules.py"),
    ("schedules/rules.py", "schedules/schedule_rules.py"),
    ("idempotency/rules.py", "idempotency/idempotency_rules.py"),
    ("inbox/rules.py", "webhooks/inbox_rules.py"),
    # the console (the Job Inbox's management app and page)
    ("admin/api.py", "console/management_app.py"),
    ("admin/console.py", "console/console_routes.py"),
    ("admin/codes.py", "console/problem_codes.py"),
)
#: (old, new) directories under lib/drainpipe: every file left in ``old`` moves along
DIR_MOVES: tuple[tuple[str, str], ...] = (
    ("inbox", "webhooks"),
    ("admin", "console"),
)
#: packages and modules that no longer exist: where each name they exported lives now
SYMBOL_HOMES: dict[str, dict[str, str]] = {
    "drainpipe.drain": {
        "DevDrain": "drainpipe.jobs.dev_drain",
        "dev_drain": "drainpipe.jobs.dev_drain",
        "dev_drain_secret": "drainpipe.jobs.dev_drain",
        "DrainRoute": "drainpipe.jobs.drain_route",
        "MonitorRequest": "drainpipe.jobs.drain_route",
        "RequestURL": "drainpipe.jobs.drain_route",
        "DrainUnavailable": "drainpipe.jobs.drain_unavailable",
        "missing_sql": "drainpipe.jobs.drain_unavailable",
    },
    # split by flow: the envelope and its view with the pull that hands it out, event ids
    # and lease ids with the checks an ack reads them with, and what the calls answer
    "drainpipe.agents.envelope": {
        "UNTRUSTED": "drainpipe.agents.reads",
        "AckMode": "drainpipe.agents.reads",
        "Order": "drainpipe.agents.reads",
        "Source": "drainpipe.agents.reads",
        "source_id": "drainpipe.agents.reads",
        "source_of": "drainpipe.agents.reads",
        "Envelope": "drainpipe.agents.reads",
        "new_envelope": "drainpipe.agents.reads",
        "select_view": "drainpipe.agents.reads",
        "body_fits": "drainpipe.agents.reads",
        "cap_view": "drainpipe.agents.reads",
        "EVENT_PREFIX": "drainpipe.agents.statements",
        "LEASE_PREFIX": "drainpipe.agents.statements",
        "event_id_text": "drainpipe.agents.statements",
        "parse_event_id": "drainpipe.agents.statements",
        "Lease": "drainpipe.agents.statements",
        "LeaseCodec": "drainpipe.agents.statements",
        "REMEMBERED": "drainpipe.agents.statements",
        "InboxSettings": "drainpipe.agents.answers",
        "Settlement": "drainpipe.agents.answers",
        "EventPage": "drainpipe.agents.answers",
        "ClaimResult": "drainpipe.agents.answers",
    },
}
#: old package names that are also logger (and span) names: kept as they are in prose and
#: strings, only imports and ``:mod:`` references move
LOGGER_NAMES = frozenset({"drainpipe.inbox", "drainpipe.admin", "drainpipe.drain"})
#: what a bare dissolved package or module name in code stands for (``import drainpipe.drain``)
DISSOLVED_STANDS_FOR = {
    "drainpipe.drain": "drainpipe.jobs.drain_route",
    "drainpipe.agents.envelope": "drainpipe.agents.answers",
}


# -- the table as module names ---------------------------------------------------------------


def module_name(path: str) -> str:
    """``inbox/service.py`` -> ``drainpipe.inbox.service``; ``leases/__init__.py`` ->
    ``drainpipe.leases``."""
    parts = ["drainpipe", *Path(path).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def planned_moves() -> list[tuple[Path, Path | None]]:
    """Every (old, new) file move still to do (new None: delete), in order."""
    moves: list[tuple[Path, Path | None]] = []
    explicit = set()
    for old, new in FILE_MOVES:
        explicit.add(old)
        if (LIB / old).exists():
            moves.append((LIB / old, LIB / new if new else None))
    for old_dir, new_dir in DIR_MOVES:
        base = LIB / old_dir
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(LIB).as_posix()
            if path.is_file() and rel not in explicit and "__pycache__" not in path.parts:
                moves.append((path, LIB / new_dir / path.relative_to(base)))
    return moves


def module_map() -> dict[str, str]:
    """Old dotted module and package names -> new ones (dissolved packages excluded)."""
    mapping: dict[str, str] = {}
    for old, new in FILE_MOVES:
        if new:
            mapping[module_name(old)] = module_name(new)
    for old_dir, new_dir in DIR_MOVES:
        mapping[module_name(old_dir)] = module_name(new_dir)
    return mapping


MODULES = module_map()
DIR_PREFIXES = {module_name(old): module_name(new) for old, new in DIR_MOVES}


def map_module(name: str) -> str | None:
    """The new name of module ``name`` (None: not an old name)."""
    if name in MODULES:
        return MODULES[name]
    for old, new in DIR_PREFIXES.items():
        if name.startswith(old + "."):
            return new + name[len(old) :]
    return None


def is_old(name: str) -> bool:
    return map_module(name) is not None or name in SYMBOL_HOMES


def old_module(name: str) -> bool:
    """Whether ``name`` is an old module or package (not a name defined in one): its new
    file exists (after the moves), or its old one (before them)."""
    new = map_module(name)
    if new is None:
        return name in SYMBOL_HOMES
    return module_exists(new) or module_exists(name)


def new_home(module: str, symbol: str | None) -> str:
    """Where ``symbol`` (or the module itself, None) imported from ``module`` lives now."""
    if module in SYMBOL_HOMES:
        if symbol is not None and symbol in SYMBOL_HOMES[module]:
            return SYMBOL_HOMES[module][symbol]
        return DISSOLVED_STANDS_FOR[module]
    return map_module(module) or module


# -- moving files ----------------------------------------------------------------------------


def move_files(check: bool) -> dict[Path, tuple[str, bool]]:
    """Do the moves; returns {new path: (the module name it had, was a package)}."""
    moved: dict[Path, tuple[str, bool]] = {}
    for old, new in planned_moves():
        rel = old.relative_to(ROOT)
        if new is None:
            print(f"remove {rel} (its names: SYMBOL_HOMES)")
            if not check:
                git("rm", "-q", str(old))
            continue
        print(f"move   {rel} -> {new.relative_to(ROOT)}")
        if check:
            continue
        if new.exists():
            raise SystemExit(f"both {rel} and {new.relative_to(ROOT)} exist: merge them by hand")
        new.parent.mkdir(parents=True, exist_ok=True)
        if tracked(old):
            git("mv", str(old), str(new))
        else:
            old.rename(new)
        if old.suffix == ".py":
            moved[new] = (module_name(old.relative_to(LIB).as_posix()), old.name == "__init__.py")
    if not check:
        for old_dir in ("ops", "drain", *(old for old, _ in DIR_MOVES)):
            leftover = LIB / old_dir
            if leftover.is_dir():
                stray = [
                    p for p in leftover.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                ]
                if stray:
                    print(f"warning: no place in the table for {[str(p) for p in stray]}")
                else:
                    shutil.rmtree(leftover)
    return moved


def tracked(path: Path) -> bool:
    listed = ["git", "ls-files", "--error-unmatch", str(path)]
    return subprocess.run(listed, cwd=ROOT, capture_output=True).returncode == 0  # noqa: S603


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=True)  # noqa: S603, S607 - our own tree


# -- imports -----------------------------------------------------------------------------------


def file_module(path: Path) -> tuple[str, bool] | None:
    """(dotted name, is a package) of a Python file of ours, or None for a script."""
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "lib":
        rel = rel.relative_to("lib")
    parts = list(rel.with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(parts), package


def absolute(module: str | None, level: int, here: str, package: bool) -> str:
    if not level:
        return module or ""
    base = here if package else here.rpartition(".")[0]
    for _ in range(level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{module}" if module else base


def relative(target: str, here: str, package: bool) -> str:
    """``target`` written relative to module ``here`` (``.x``, ``..y.z``)."""
    base = (here if package else here.rpartition(".")[0]).split(".")
    parts = target.split(".")
    common = 0
    while common < min(len(base), len(parts)) and base[common] == parts[common]:
        common += 1
    return "." * (len(base) - common + 1) + ".".join(parts[common:])


def rewrite_imports(source: str, here: str, package: bool, was: str, was_package: bool) -> str:
    """Imports of ``source`` (a module now named ``here``, written as ``was``) in the new
    layout. Statements that need no change keep their text, comments and all."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            text = rewrite_from(node, here, package, was, was_package)
        elif isinstance(node, ast.Import):
            text = rewrite_plain(node)
        else:
            continue
        if text is None:
            continue
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        old = source[start:end]
        if text.startswith("\0"):
            module = re.match(r"from\s+[.\w]+", old)
            assert module is not None
            text = "from " + text[1:] + old[module.end() :]
        if text != old:
            indent = " " * node.col_offset
            edits.append((start, end, text.replace("\n", "\n" + indent)))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def rewrite_from(
    node: ast.ImportFrom, here: str, package: bool, was: str, was_package: bool
) -> str | None:
    """The statement's new text: ``"\0" + module`` when only its module changes (the
    caller keeps the rest of the text), None when nothing changes."""
    target = absolute(node.module, node.level, was, was_package)
    if not (target == "drainpipe" or target.startswith("drainpipe.")):
        return None
    groups: dict[str, list[str]] = {}
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        exported = alias.name in SYMBOL_HOMES.get(target, {})  # the package's name wins
        if alias.name != "*" and not exported and (old_module(sub) or module_exists(sub)):
            # a module imported by name: the name may change with it
            new = new_home(sub, None)
            parent, _, leaf = new.rpartition(".")
            bound = alias.asname or alias.name
            groups.setdefault(parent, []).append(leaf if leaf == bound else f"{leaf} as {bound}")
        else:
            home = new_home(target, alias.name)
            name = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
            groups.setdefault(home, []).append(name)
    same = [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names]
    if len(groups) == 1 and next(iter(groups.values())) == same:
        home = next(iter(groups))
        written = relative(home, here, package) if node.level else home
        original = ("." * node.level) + (node.module or "")
        return None if written == original else "\0" + written
    statements = []
    for home, names in groups.items():
        written = relative(home, here, package) if node.level else home
        statements.append(f"from {written} import {', '.join(names)}")
    return "\n".join(statements)


def rewrite_plain(node: ast.Import) -> str | None:
    changed = False
    names = []
    for alias in node.names:
        new = alias.name
        if is_old(alias.name):
            new = new_home(alias.name, None)
            changed = True
        names.append(new if alias.asname is None else f"{new} as {alias.asname}")
    return f"import {', '.join(names)}" if changed else None


def module_exists(name: str) -> bool:
    if not name.startswith("drainpipe"):
        return False
    path = LIB.parent / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


# -- names and paths in text -----------------------------------------------------------------

DOTTED = re.compile(r"(?<![\w.])drainpipe(?:\.[A-Za-z_]\w*)+")


def rewrite_dotted(text: str, code_string: bool = False) -> str:
    """``drainpipe.inbox.service`` -> ``drainpipe.webhooks.service``; a bare package name
    (a logger's name as well) only where ``code_string`` says the text is code."""

    def replace(match: re.Match[str]) -> str:
        parts = match.group(0).split(".")
        for cut in range(len(parts), 1, -1):
            prefix = ".".join(parts[:cut])
            rest = parts[cut:]
            if prefix in SYMBOL_HOMES:
                if rest and rest[0] in SYMBOL_HOMES[prefix]:
                    return ".".join([SYMBOL_HOMES[prefix][rest[0]], *rest])
                if not rest and (code_string or match.string[: match.start()].endswith(":mod:`")):
                    return DISSOLVED_STANDS_FOR[prefix]
                return match.group(0)
            new = map_module(prefix)
            if new is None or not old_module(prefix):
                continue
            as_code = code_string or match.string[: match.start()].endswith((":mod:`", ":mod:`~"))
            bare_package = prefix in LOGGER_NAMES
            if bare_package and not rest and not as_code:
                return match.group(0)
            if bare_package and rest and not old_module(f"{prefix}.{rest[0]}") and not as_code:
                # drainpipe.drain.budget_used, drainpipe.inbox.claim: a metric or span name
                return match.group(0)
            return ".".join([new, *rest])
        return match.group(0)

    return DOTTED.sub(replace, text)


@functools.cache
def path_pattern() -> tuple[re.Pattern[str], dict[str, str]]:
    """Old file paths -> new ones (computed once, after the moves)."""
    paths: dict[str, str] = {}
    for old, new in FILE_MOVES:
        if new and "/" in old:  # a bare top-level name (leases.py) is ambiguous in prose
            paths[old] = new
    for old_dir, new_dir in DIR_MOVES:
        base = LIB / new_dir
        if base.is_dir():
            files = [p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            for path in files:  # the package data too (console/static/page.html)
                rel = path.relative_to(base).as_posix()
                old_path = f"{old_dir}/{rel}"
                if old_path not in paths and f"{new_dir}/{rel}" not in paths.values():
                    paths[old_path] = f"{new_dir}/{rel}"
        paths[f"{old_dir}/"] = f"{new_dir}/"
    rooted = {old: new for old, new in FILE_MOVES if new and "/" not in old}
    alternatives = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
    top = "|".join(re.escape(p) for p in sorted(rooted, key=len, reverse=True))
    pattern = re.compile(
        rf"(?<![\w/.-])(?:((?:lib/)?drainpipe/)?({alternatives})|((?:lib/)?drainpipe/)({top}))(?![\w])"
    )
    paths |= rooted
    return pattern, paths


def rewrite_paths(text: str) -> str:
    pattern, paths = path_pattern()

    def replace(match: re.Match[str]) -> str:
        root, old = (match.group(1), match.group(2)) if match.group(2) else match.group(3, 4)
        if old.endswith("/") and not (root or is_quoted_dir(match)):
            return match.group(0)  # "inbox/" in prose: only a quoted or rooted one is a path
        return (root or "") + paths[old]

    return pattern.sub(replace, text)


def is_quoted_dir(match: re.Match[str]) -> bool:
    text = match.string
    before = text[match.start() - 1] if match.start() else ""
    after = text[match.end()] if match.end() < len(text) else ""
    return before in "`\"'" and after in "`\"'"


def rewrite_strings(source: str) -> str:
    """Dotted names inside string literals of code that are themselves code
    (``"import drainpipe.drain"`` run in a subprocess)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    segments = []
    for node in ast.walk(tree):
        value = node.value if isinstance(node, ast.Constant) else None
        if isinstance(value, str) and "import " in value and DOTTED.search(value):
            segment = ast.get_source_segment(source, node)
            if segment is not None:
                segments.append(segment)
    for segment in segments:
        source = source.replace(segment, rewrite_dotted(segment, code_string=True))
    return source


MOD_REFERENCE = re.compile(r":mod:`(\.+[\w.]*)`")


def rewrite_references(source: str, here: str, package: bool, was: str, was_package: bool) -> str:
    """Relative ``:mod:`.rules``` references of docstrings, as imports are rewritten."""

    def replace(match: re.Match[str]) -> str:
        written = match.group(1)
        level = len(written) - len(written.lstrip("."))
        target = absolute(written[level:] or None, level, was, was_package)
        new = new_home(target, None) if old_module(target) else target
        if new == target and here == was:
            return match.group(0)
        return f":mod:`{relative(new, here, package)}`"

    return MOD_REFERENCE.sub(replace, source)


def rewrite_exports(source: str, here: str, was: str, package: bool) -> str:
    """``_EXPORTS = {"Name": "module"}`` tables of lazy packages (relative module names)."""
    if not package:
        return source
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Dict)
            and "_EXPORTS"
            in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
        ):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if not (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                continue
            old = f"{was}.{value.value}"
            if not is_old(old):
                continue
            new = new_home(old, key.value)
            short = new[len(here) + 1 :] if new.startswith(here + ".") else None
            if short is None:
                raise SystemExit(f"{here}: {key.value} moved out of the package ({new})")
            source = source.replace(f'"{key.value}": "{value.value}"', f'"{key.value}": "{short}"')
    return source


# -- the run ---------------------------------------------------------------------------------


def python_files() -> list[Path]:
    found: list[Path] = []
    for top in CODE_DIRS:
        base = ROOT / top
        if base.is_dir():
            found += [
                p
                for p in base.rglob("*.py")
                if "__pycache__" not in p.parts and p != Path(__file__).resolve()
            ]
    return sorted(found)


def text_files() -> list[Path]:
    found: set[Path] = set()
    for pattern in TEXT_FILES:
        found |= {p for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(found)


def rewrite_python(path: Path, was_as: tuple[str, bool] | None) -> str:
    source = path.read_text(encoding="utf-8")
    info = file_module(path)
    if info is None:
        return source
    here, package = info
    was, was_package = was_as or info
    new = rewrite_imports(source, here, package, was, was_package)
    new = rewrite_exports(new, here, was, package)
    new = rewrite_references(new, here, package, was, was_package)
    new = rewrite_strings(new)
    new = rewrite_dotted(new)
    return rewrite_paths(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="say what would change, change nothing"
    )
    args = parser.parse_args(argv)
    moved = move_files(args.check)
    changed: list[Path] = []
    for path in python_files():
        source = path.read_text(encoding="utf-8")
        new = rewrite_python(path, moved.get(path))
        if new != source:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in text_files():
        source = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = rewrite_paths(rewrite_dotted(rewrite_docs_imports(source)))
        if new != source:
            changed.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8", errors="surrogateescape")
    for path in changed:
        print(f"{'would rewrite' if args.check else 'rewrote'} {path.relative_to(ROOT)}")
    if not args.check and changed:
        tidy([p for p in changed if p.suffix == ".py"])
    return 1 if args.check and (changed or planned_moves()) else 0


DOC_IMPORT = re.compile(r"^([ \t]*)(from drainpipe(?:\.\w+)+ import [\w, ]+)$", re.MULTILINE)


def rewrite_docs_imports(text: str) -> str:
    """``from drainpipe.inbox import WebhookMessage`` on a line of a doc's code: the new
    module, read as the Python files' imports are."""

    def replace(match: re.Match[str]) -> str:
        indent, statement = match.groups()
        node = ast.parse(statement).body[0]
        assert isinstance(node, ast.ImportFrom)
        new = rewrite_from(node, "drainpipe", True, "drainpipe", True)
        if new is None:
            return match.group(0)
        if new.startswith("\0"):
            new = f"from {new[1:]} import {statement.split(' import ', 1)[1]}"
        return "\n".join(indent + line for line in new.splitlines())

    return DOC_IMPORT.sub(replace, text)


def tidy(paths: list[Path]) -> None:
    """Imports sorted and formatted as the project's ruff wants them."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    files = [str(p) for p in paths]
    subprocess.run([ruff, "check", "-q", "--fix", "--select", "I", *files], cwd=ROOT, check=False)  # noqa: S603
    subprocess.run([ruff, "format", "-q", *files], cwd=ROOT, check=False)  # noqa: S603


if __name__ == "__main__":
    sys.exit(main())
