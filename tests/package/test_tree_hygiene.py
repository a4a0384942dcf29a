"""The tree as committed: no merge left its conflict markers in any file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".sql",
    ".toml",
    ".json",
    ".yml",
    ".yaml",
    ".html",
    ".txt",
    ".sh",
    "",
}
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def text_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        if any(part in SKIPPED for part in path.relative_to(ROOT).parts):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES and path.stat().st_size < 2_000_000:
            found.append(path)
    return found


def test_no_file_holds_merge_conflict_markers() -> None:
    marked = []
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if MARKER.search(text):
            marked.append(str(path.relative_to(ROOT)))
    assert marked == []
