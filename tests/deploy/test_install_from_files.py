"""Lambda, Cloud Run functions and Vercel install drainpipe from what their own files name
(no package index serves it): a copy of the repository runs ``scripts/wheel``, then each
deployment's files are installed into a clean venv (uv, from its cache when it can) and
every function file is imported there, as the platform would, with nothing else on the path.

- examples/aws-lambda and examples/gcp: ``requirements.txt`` names the wheel that
  ``scripts/wheel`` copies next to it, installed from that folder (``sam build``, and
  Cloud Build's pip, run there).
- Vercel (``api/*.py``, ``vercel.json``): the dependencies ``pyproject.toml`` lists; the
  function files import drainpipe from ``lib/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
WHEEL = f"drainpipe-{VERSION}-py3-none-any.whl"
# the interpreter that scripts/_bootstrap.sh runs uv with (this suite's .venv has no uv)
BOOTSTRAP_PYTHON = os.environ.get("PYTHON", "python3")
# what a deployment of this repository holds (Vercel uploads the whole tree)
COPIED = ["pyproject.toml", "README.md", "LICENSE", "vercel.json", "lib", "sql", "api"]
COPIED += ["functions", "scripts", "examples/aws-lambda", "examples/gcp"]

# Imports each file by its path as the platform does and checks the entry it names; prints
# where drainpipe came from.
IMPORT = """
import importlib.util, sys
for path, entries in [{files}]:
    spec = importlib.util.spec_from_file_location("fn_" + str(abs(hash(path))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for entry in entries:
        assert callable(getattr(module, entry)), (path, entry)
import drainpipe
print(drainpipe.__file__)
"""

# Renders the admin page from an installed drainpipe: the template's placeholders are all
# filled and the CSS and JS are inline, under the response's nonce
PAGE = """
import drainpipe
from drainpipe.console.page import page_response
body = page_response(base="/admin", target="prod").body.decode()
assert "{{" not in body and "<style nonce=" in body and "<script nonce=" in body, body[:300]
assert "color-scheme" in body and "sessionStorage" in body, "page.css or page.js missing"
print(drainpipe.__file__)
"""


def uv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    command = [BOOTSTRAP_PYTHON, "-m", "uv", *args]
    # from uv's cache (the versions this suite runs on); the index only when it lacks one
    for offline in ("1", ""):
        done = subprocess.run(  # noqa: S603 - uv with fixed arguments
            command, cwd=cwd, env={**env, "UV_OFFLINE": offline},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode == 0:
            break
    assert done.returncode == 0, done.stderr
    return done


def clean_venv(folder: Path) -> Path:
    uv("venv", "-q", str(folder), "--python", sys.base_prefix + "/bin/python3", cwd=folder.parent)
    return folder / "bin" / "python"


def imported_from(python: Path, cwd: Path, files: dict[str, tuple[str, ...]]) -> str:
    listed = ", ".join(f"({path!r}, {entries!r})" for path, entries in files.items())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(  # noqa: S603 - the clean venv's interpreter, our own script
        [str(python), "-c", IMPORT.format(files=listed)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_requirements_name_the_wheel_of_this_version() -> None:
    for folder, extra in (("examples/aws-lambda", "aws"), ("examples/gcp", "gcp")):
        lines = (ROOT / folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
        wanted = [line for line in lines if line.strip() and not line.startswith("#")]
        assert wanted == [f"./{WHEEL}[{extra}]"], folder
    assert re.search(r"examples/\*/drainpipe-\*\.whl", (ROOT / ".gitignore").read_text())
    # Vercel's bundles must keep lib/, where the function files import drainpipe from
    vercel = json.loads((ROOT / "vercel.json").read_text(encoding="utf-8"))
    for name, function in vercel["functions"].items():
        assert "lib" not in re.findall(r"[\w.-]+", function.get("excludeFiles", "")), name


@pytest.mark.slow  # a wheel build and three venvs: about 10 s
def test_each_platform_installs_drainpipe_from_its_own_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in COPIED:
        source, target = ROOT / name, repo / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.whl"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    for offline in ("1", ""):  # the build backend from uv's cache, else from the index
        built = subprocess.run(  # noqa: S603 - the repository's own script
            [str(repo / "scripts/wheel")],
            env={**os.environ, "PYTHON": BOOTSTRAP_PYTHON, "UV_OFFLINE": offline},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if built.returncode == 0:
            break
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == f"dist/{WHEEL}"
    # the package data ships: every file under lib/drainpipe that is not Python (the admin
    # page's HTML, CSS and JS) is in the wheel, next to the modules that read it
    with zipfile.ZipFile(repo / "dist" / WHEEL) as wheel:
        shipped = set(wheel.namelist())
    package = repo / "lib"
    data = {
        str(path.relative_to(package))
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"} and "__pycache__" not in path.parts
    }
    assert {"drainpipe/console/static/page.html", "drainpipe/console/static/page.js"} <= data
    assert data - shipped == set()
    # pin every dependency to the version this suite runs (uv's cache holds those)
    frozen = uv("pip", "freeze", "--python", sys.executable, cwd=repo).stdout.splitlines()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "\n".join(line for line in frozen if not line.startswith(("-e", "drainpipe"))) + "\n"
    )

    entries = {
        "examples/aws-lambda": {"handler.py": ("handler", "app")},
        "examples/gcp": {"main.py": ("drain", "billing_webhook")},
    }
    for folder, files in entries.items():
        deployed = repo / folder
        assert (deployed / WHEEL).is_file(), f"scripts/wheel did not copy the wheel to {folder}"
        python = clean_venv(tmp_path / f"venv-{deployed.name}")
        uv("pip", "install", "-q", "--python", str(python), "-r", "requirements.txt",
           "-c", str(constraints), cwd=deployed)  # fmt: skip
        origin = imported_from(python, deployed, files)
        assert origin.startswith(str(tmp_path / f"venv-{deployed.name}")), origin
    # the installed wheel serves the admin page whole: its CSS and JS read from the package
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    page = subprocess.run(  # noqa: S603 - the clean venv's interpreter, our own script
        [str(python), "-c", PAGE], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert page.returncode == 0, page.stderr[-3000:]
    assert page.stdout.strip().startswith(str(tmp_path / "venv-gcp")), page.stdout

    # Vercel: pyproject.toml's dependencies, the function files import drainpipe from lib/
    python = clean_venv(tmp_path / "venv-vercel")
    uv("pip", "install", "-q", "--python", str(python), "-r", "pyproject.toml",
       "-c", str(constraints), cwd=repo)  # fmt: skip
    functions = {f"api/{path.name}": ("app",) for path in sorted((repo / "api").glob("*.py"))}
    assert len(functions) >= 6, functions
    assert imported_from(python, repo, functions) == str(repo / "lib/drainpipe/__init__.py")
