"""Arrows point down: no import cycle between modules or between drainpipe's subpackages.

Only imports that run when a module loads count (statements at a module's top level);
imports under ``if TYPE_CHECKING:`` and inside functions are not arrows, which is how a
package below hands a name to one above without importing it at load time.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import drainpipe

ROOT = Path(drainpipe.__file__).parent


def _module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _load_time_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # `from pkg import module` is an arrow to the module, else to the package; the
            # package too unless the importer is inside it (then it is loaded already)
            modules = {f"{target}.{alias.name}" for alias in node.names} & known.keys()
            inside = name.startswith(target + ".")
            if target in known and not (inside and len(modules) == len(node.names)):
                found.add(target)
            found |= modules
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    known = _module_names()
    return {name: _load_time_imports(name, path, known) for name, path in known.items()}


def _package_of(module: str) -> str:
    # drainpipe.jobs.client -> drainpipe.jobs; drainpipe.errors -> drainpipe.errors
    return ".".join(module.split(".")[:2])


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_no_module_imports_itself_back_at_load_time() -> None:
    assert _cycle(_graph()) is None


def test_no_two_subpackages_import_each_other() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        if module == "drainpipe":
            continue  # the public face imports everything and nothing imports it back
        source = _package_of(module)
        edges = packages.setdefault(source, set())
        edges |= {_package_of(t) for t in targets if _package_of(t) != source}
    assert _cycle(packages) is None


def test_the_check_sees_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"a"}}) is not None
