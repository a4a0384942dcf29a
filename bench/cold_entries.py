"""Cold start of each platform entry: the import time of its entry file, median of fresh
processes (target: under 150 ms).

    python -m bench.cold_entries            # 5 fresh processes per entry
    python -m bench.cold_entries --runs 9

Each process first imports what the platform itself has loaded before it imports the
user's file (functions-framework on Cloud Run functions; nothing of ours on Lambda, whose
runtime is not a package we ship), then times the entry file's import alone. Building the
apps (pools, secrets) happens on the first request and is not part of this number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 150.0

# what runs in each fresh process: preload the platform, then time the entry's import
PROBE = """
import importlib, importlib.util, json, sys, time
for name in {preload!r}:
    importlib.import_module(name)
sys.path.insert(0, {folder!r})
started = time.perf_counter()
spec = importlib.util.spec_from_file_location("entry_under_test", {path!r})
module = importlib.util.module_from_spec(spec)
sys.modules["entry_under_test"] = module
spec.loader.exec_module(module)
print(json.dumps({{"ms": (time.perf_counter() - started) * 1000}}))
"""


@dataclass(frozen=True)
class Entry:
    name: str
    path: Path
    preload: tuple[str, ...] = ()


ENTRIES = (
    Entry("aws-lambda handler.py", ROOT / "examples/aws-lambda/handler.py"),
    Entry("gcp main.py", ROOT / "examples/gcp/main.py", preload=("functions_framework",)),
    Entry("container worker.py", ROOT / "examples/container/worker.py"),
    Entry("postgrest drain.py", ROOT / "examples/postgrest/drain.py"),
)


def import_ms(entry: Entry) -> float:
    code = PROBE.format(preload=entry.preload, folder=str(entry.path.parent), path=str(entry.path))
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    return float(json.loads(result.stdout.strip().splitlines()[-1])["ms"])


def measure(runs: int) -> list[tuple[Entry, float | None, str]]:
    rows: list[tuple[Entry, float | None, str]] = []
    for entry in ENTRIES:
        try:
            times = [import_ms(entry) for _ in range(runs)]
        except subprocess.CalledProcessError as exc:
            reason = (exc.stderr or "").strip().splitlines()[-1:] or ["failed"]
            rows.append((entry, None, reason[0]))
            continue
        rows.append((entry, statistics.median(times), ""))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per entry")
    args = parser.parse_args(argv)
    rows = measure(max(1, args.runs))
    width = max(len(entry.name) for entry, _, _ in rows)
    print(f"cold start: entry file import, median of {args.runs} fresh processes")
    print(f"{'entry':<{width}}  {'median ms':>9}  target < {TARGET_MS:g} ms")
    over = 0
    for entry, median, error in rows:
        if median is None:
            over += 1
            print(f"{entry.name:<{width}}  {'error':>9}  {error}")
            continue
        verdict = "ok" if median < TARGET_MS else "OVER"
        over += verdict != "ok"
        preload = f" (after {', '.join(entry.preload)})" if entry.preload else ""
        print(f"{entry.name:<{width}}  {median:>9.1f}  {verdict}{preload}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
