"""vercel.json against Vercel's documented schema, and against what `drainpipe dev` serves.

`vercel build` is not available here, so these checks hold the config to the parts of
https://openapi.vercel.sh/vercel.json it uses (functions, crons, rewrites; no legacy
builds/routes, which override the project settings and cannot be combined with functions)
and to Vercel's layout rules (Python functions are the ``.py`` files under ``api/``; a
``functions`` pattern matching none of them fails the deploy).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import drainpipe
from drainpipe.dev.functions import FunctionsApp
from tests.conftest import ROOT

CONFIG: dict[str, Any] = json.loads((ROOT / "vercel.json").read_text(encoding="utf-8"))
TOP_LEVEL = {"$schema", "functions", "crons", "rewrites"}
FUNCTION_KEYS = {"maxDuration", "memory", "excludeFiles", "includeFiles", "runtime"}
NOT_SHIPPED = ("tests", "bench", "docs", ".github", "scripts")
SHIPPED = ("lib/drainpipe/__init__.py", "functions/_app.py", "functions/drain.py", "sql")


def vercel_glob(pattern: str) -> re.Pattern[str]:
    """A Vercel (minimatch-style) glob as a regex: ``{a,b}`` alternatives, ``**`` any
    folders, ``*`` and ``?`` within one path segment."""
    out = ""
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
            continue
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
            continue
        out += {"*": "[^/]*", "?": "[^/]", "{": "(?:", "}": ")", ",": "|"}.get(
            char, re.escape(char)
        )
        i += 1
    return re.compile(out)


def function_files() -> list[str]:
    """The files Vercel turns into Python functions: ``api/**/*.py`` but ``_*``/``.*``."""
    files = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if not any(part.startswith(("_", ".")) for part in relative.parts[1:]):
            files.append(relative.as_posix())
    return files


def vercel_routes() -> set[str]:
    """The paths a deployment of this config answers: each function file's path, and each
    rewrite source."""
    paths = {"/" + file.removesuffix(".py").removesuffix("/index") for file in function_files()}
    return paths | {rewrite["source"] for rewrite in CONFIG.get("rewrites", [])}


def test_only_the_current_keys_are_used() -> None:
    assert set(CONFIG) <= TOP_LEVEL, sorted(set(CONFIG) - TOP_LEVEL)
    assert "builds" not in CONFIG and "routes" not in CONFIG
    assert CONFIG["$schema"] == "https://openapi.vercel.sh/vercel.json"


def test_glob_helper_follows_vercel_patterns() -> None:
    pattern = vercel_glob("{tests/**,**/*.pyc,api/*.py}")
    assert pattern.fullmatch("tests/a/b.py") and pattern.fullmatch("lib/x/y.pyc")
    assert pattern.fullmatch("api/drain.py") and not pattern.fullmatch("api/sub/drain.py")
    assert not pattern.fullmatch("lib/drainpipe/tests.py")


def test_each_function_has_a_config_and_each_config_a_function() -> None:
    functions: dict[str, dict[str, Any]] = CONFIG["functions"]
    files = function_files()
    assert files == [
        "api/agent_inbox.py",
        "api/billing_webhook.py",
        "api/drain.py",
        "api/executor.py",
        "api/jobs.py",
        "api/orders.py",
    ]
    for pattern, settings in functions.items():
        assert pattern.startswith("api/"), f"{pattern}: Vercel only builds functions in api/"
        matched = [file for file in files if vercel_glob(pattern).fullmatch(file)]
        assert matched, f"{pattern} matches no function: the deploy would fail"
        assert set(settings) <= FUNCTION_KEYS, (pattern, sorted(set(settings) - FUNCTION_KEYS))
        duration = settings["maxDuration"]
        assert isinstance(duration, int) and 1 <= duration <= 800, pattern
        if "memory" in settings:
            assert isinstance(settings["memory"], int) and 128 <= settings["memory"] <= 3009
        for key in ("excludeFiles", "includeFiles", "runtime"):
            assert isinstance(settings.get(key, ""), str), (pattern, key)
    for file in files:
        assert any(vercel_glob(p).fullmatch(file) for p in functions), f"{file} has no config"


def test_the_drain_function_outlasts_its_budget() -> None:
    # functions/drain.py claims for DRAIN_BUDGET (default 50 s): the function's
    # maxDuration must leave it time to finish the jobs it claimed and answer
    [settings] = [
        s for p, s in CONFIG["functions"].items() if vercel_glob(p).fullmatch("api/drain.py")
    ]
    assert settings["maxDuration"] >= 60
    assert "DRAIN_BUDGET" in (ROOT / "functions/drain.py").read_text(encoding="utf-8")


def _all_files(folder: str) -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file()]


@pytest.mark.parametrize("pattern", sorted(CONFIG["functions"]))
def test_bundles_leave_tests_bench_and_docs_out(pattern: str) -> None:
    exclude = vercel_glob(CONFIG["functions"][pattern]["excludeFiles"])
    for folder in NOT_SHIPPED:
        for file in _all_files(folder) or [f"{folder}/placeholder.md"]:
            assert exclude.fullmatch(file), f"{pattern} would ship {file}"
    for file in [*SHIPPED, *function_files()]:
        for shipped in _all_files(file) if (ROOT / file).is_dir() else [file]:
            if shipped.endswith(".md"):
                continue  # a contributor's note beside the SQL (sql/README.md): not run
            assert not exclude.fullmatch(shipped), f"{pattern} would leave out {shipped}"


def test_vercelignore_keeps_what_the_functions_need() -> None:
    lines = (ROOT / ".vercelignore").read_text(encoding="utf-8").splitlines()
    ignored = {
        line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")
    }
    assert {"tests", "bench", "docs"} <= ignored
    assert ignored.isdisjoint({"lib", "api", "functions", "sql", "pyproject.toml"})


def test_crons_are_valid_and_call_a_served_path() -> None:
    crons: list[dict[str, Any]] = CONFIG["crons"]
    assert crons, "the drain route needs a caller"
    for cron in crons:
        assert set(cron) == {"path", "schedule"}, cron
        drainpipe.assert_cron(cron["schedule"])
        assert cron["path"] in vercel_routes(), cron["path"]
    assert {cron["path"] for cron in crons} == {"/api/drain"}


def test_rewrites_point_at_functions() -> None:
    functions = {"/" + file.removesuffix(".py") for file in function_files()}
    for rewrite in CONFIG.get("rewrites", []):
        assert set(rewrite) == {"source", "destination"}, rewrite
        assert rewrite["source"].startswith("/") and rewrite["destination"] in functions


def test_dev_serves_exactly_what_vercel_serves() -> None:
    served = FunctionsApp.load(ROOT / "api")
    assert set(served.routes()) == vercel_routes()
    assert served.warnings == []


def test_dev_warns_about_a_legacy_config_and_dangling_rewrites(tmp_path: Path) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "hello.py").write_text(
        "async def app(scope, receive, send):\n    pass\n", encoding="utf-8"
    )
    (tmp_path / "vercel.json").write_text(
        json.dumps(
            {
                "builds": [{"src": "api/hello.py", "use": "@vercel/python"}],
                "rewrites": [
                    {"source": "/hi/:name", "destination": "/api/hello"},
                    {"source": "/gone", "destination": "/api/nothing"},
                ],
            }
        ),
        encoding="utf-8",
    )
    served = FunctionsApp.load(tmp_path / "api")
    assert served.routes() == {"/api/hello": "api/hello.py", "/hi/:name": "api/hello.py"}
    assert served.match("/hi/bob") is not None and served.match("/hi/bob/x") is None
    assert len(served.warnings) == 2
    assert "builds/routes" in served.warnings[0] and "/api/nothing" in served.warnings[1]
