"""The README's tour runs as written: its Python blocks, in order, in a fresh interpreter,
against a test database instead of the DSN the README names. What each ``print`` is
annotated with in the README is what it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_DSN = "postgresql://postgres@127.0.0.1:5432/app"


def tour_blocks() -> list[str]:
    """The ```python blocks under "## A five-minute tour", up to the next section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## A five-minute tour")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


def annotated_prints(source: str) -> list[str]:
    """The README's own claims: ``print(...)  # <what it prints>`` (up to an ellipsis)."""
    claims = re.findall(r"^[ \t]*print\(.*\)[ \t]+# (.+)$", source, flags=re.MULTILINE)
    return [claim.split("...")[0].strip().rstrip(",") for claim in claims]


def test_the_tour_runs_as_written_and_prints_what_it_says(db_url: str) -> None:
    blocks = tour_blocks()
    assert len(blocks) == 2, "the tour's two blocks: jobs, then schedules/inbox/leases"
    source = "\n".join(blocks)
    assert source.count(README_DSN) == 1, "the tour names its DSN once"
    run = subprocess.run(  # noqa: S603 - our own interpreter on our own README
        [sys.executable, "-c", source.replace(README_DSN, db_url)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    printed = run.stdout
    claims = annotated_prints(source)
    assert len(claims) == 5
    for claim in claims:
        assert claim in printed, f"the README says {claim!r}; the tour printed:\n{printed}"
    assert "sending hi to a@example.com attempt 1" in printed


def test_the_with_lease_line_hands_fn_the_lease_and_returns_an_outcome() -> None:
    """Issue 35 item 6: ``fn`` receives the held lease, the call returns a LeaseOutcome."""
    source = "\n".join(tour_blocks())
    assert "async def build_report(held: drainpipe.Lease)" in source
    assert 'drainpipe.with_lease(DSN, "nightly-report", build_report, seconds=120)' in source
    assert "LeaseOutcome(acquired=True" in source
