"""Short modules, one concept each: no module of the library is over 500 lines.

A module past that is asking to be split by what it is about (see docs/layout.md), not
cut in two by line count.
"""

from __future__ import annotations

from pathlib import Path

import drainpipe

ROOT = Path(drainpipe.__file__).parent
MAX_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    too_long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}, f"split these by concept (at most {MAX_LINES} lines): {too_long}"
