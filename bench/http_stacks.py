"""Cold start of the two HTTP stacks and of every shipped function file, in fresh
interpreters (the figures of docs/architecture.md, "One HTTP stack").

    python -m bench.http_stacks              # 7 fresh processes per figure
    python -m bench.http_stacks --runs 11
    python -m bench.http_stacks --against ../main   # this checkout and another, A/B

Three figures, each the median of ``--runs`` fresh processes, run interleaved (one process
of each figure in turn, round after round) so a busy machine slows them all alike:

* **stack**: importing a web stack on its own: Starlette's modules an app needs (its
  application, routing, requests, responses, WebSockets and middleware) against drainpipe's
  own (``drainpipe.http`` and the modules beside it). Timed twice: from nothing, and on top
  of ``asyncio`` and ``import drainpipe``, which every function has loaded by its first
  request anyway, so the second figure is what the stack itself adds.
* **import**: ``import api.<name>``, what a platform does before the first request
  (each must stay under 150 ms; tests/package/test_import_time.py checks what is imported).
* **first request**: the import, then the first request (one without credentials): the
  function builds its app then, so this is the import plus building the app and whatever
  stack it uses. The answer's status is printed; it never needs the database (the agent
  inbox's function would create its inbox first: its app is called without that step).

``-X importtime``'s cumulative figures of the stack modules are printed with ``--tree``.
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

STARLETTE = (
    "starlette.applications",
    "starlette.routing",
    "starlette.requests",
    "starlette.responses",
    "starlette.websockets",
    "starlette.middleware",
)
# whichever of these exist on this checkout (the routing and WebSocket modules are new)
OURS = (
    "drainpipe.http",
    "drainpipe.http_guards",
    "drainpipe.http_connection",
    "drainpipe.http_routes",
    "drainpipe.http_websocket",
)

STACK_PROBE = """
import importlib, importlib.util, json, sys, time
sys.path[:0] = {paths!r}
for name in {preload!r}:
    importlib.import_module(name)
names = [n for n in {modules!r} if importlib.util.find_spec(n) is not None]
started = time.perf_counter()
for name in names:
    importlib.import_module(name)
print(json.dumps({{"ms": (time.perf_counter() - started) * 1000}}))
"""

ENTRY_PROBE = """
import asyncio, json, os, sys, time
sys.path[:0] = {paths!r}
os.environ.update({env!r})
started = time.perf_counter()
module = __import__("api.{name}", fromlist=["app"])
imported = time.perf_counter()

async def first_request():
    sent = []
    body = {{"more_body": False, "body": b"{{}}", "type": "http.request"}}

    async def receive():
        return body

    async def send(message):
        sent.append(message)

    scope = {{"type": "http", "asgi": {{"version": "3.0"}}, "http_version": "1.1",
             "method": {method!r}, "scheme": "https", "path": {path!r}, "raw_path": b"",
             "query_string": b"", "root_path": "", "headers": [], "client": ("127.0.0.1", 1),
             "server": ("bench", 443)}}
    app = await module.app.built()
    if isinstance(app, str):  # not configured: the bench's environment is wrong
        raise SystemExit(app)
    # the agent inbox's wrapper would create its inbox first: its app is what is timed
    app = app.app if type(app).__name__ == "_EnsureInbox" else app
    await app(scope, receive, send)
    return sent[0]["status"]

status = asyncio.run(first_request())
answered = time.perf_counter()
print(json.dumps({{"import_ms": (imported - started) * 1000,
                  "first_ms": (answered - started) * 1000, "status": status,
                  "starlette": "starlette" in sys.modules}}))
"""

# the database is never reached: each request is refused before any statement
ENV = {
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/unreached",
    "AGENT_TOKEN": "bench-agent-token-0123456789",
    "AGENT_LEASE_SECRET": "bench-lease-secret-0123456789",
    "EXECUTOR_TOKENS": "bench-executor-token-0123=*",
    "CRON_SECRET": "bench-cron-secret-0123456789abcdef0123456789abcdef",
    "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "MANAGEMENT_TOKENS": "bench-admin-token-01234567=bench:admin",
    "DRAINPIPE_SCOPE_KEY": "bench-scope-key-0123456789abcdef",
}


@dataclass(frozen=True)
class Entry:
    name: str
    method: str
    path: str


ENTRIES = (
    Entry("agent_inbox", "GET", "/v1/agent/inbox/inb_bench/next"),
    Entry("executor", "POST", "/api/executor/claim"),
    Entry("jobs", "GET", "/api/jobs/jobs"),
    Entry("drain", "POST", "/api/drain"),
    Entry("billing_webhook", "POST", "/api/billing-webhook"),
    Entry("orders", "POST", "/api/orders"),
)


def paths_of(root: Path) -> list[str]:
    return [str(root / "lib"), str(root)]


PATHS = paths_of(ROOT)


def _run(code: str) -> dict[str, object]:
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def stack_ms(modules: tuple[str, ...], preload: tuple[str, ...]) -> float:
    code = STACK_PROBE.format(paths=PATHS, preload=preload, modules=modules)
    return float(_run(code)["ms"])  # type: ignore[arg-type]


def entry_run(entry: Entry, root: Path = ROOT) -> dict[str, object]:
    code = ENTRY_PROBE.format(
        paths=paths_of(root), env=ENV, name=entry.name, method=entry.method, path=entry.path
    )
    return _run(code)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ms  (min {min(values):.1f}, max {max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tree", action="store_true", help="print -X importtime's stack lines")
    parser.add_argument(
        "--against", type=Path, help="another checkout: its function files, interleaved"
    )
    args = parser.parse_args()
    roots = [ROOT] if args.against is None else [ROOT, args.against.resolve()]

    warm = ("asyncio", "drainpipe")
    stacks = {
        ("starlette", "alone"): (STARLETTE, ()),
        ("drainpipe.http", "alone"): (OURS, ()),
        ("starlette", "after asyncio+drainpipe"): (STARLETTE, warm),
        ("drainpipe.http", "after asyncio+drainpipe"): (OURS, warm),
    }
    stack_times: dict[tuple[str, str], list[float]] = {key: [] for key in stacks}
    entry_rows: dict[tuple[str, Path], list[dict[str, object]]] = {
        (entry.name, root): [] for entry in ENTRIES for root in roots
    }
    for _ in range(args.runs):  # interleaved: every figure once per round
        for key, (modules, preload) in stacks.items():
            stack_times[key].append(stack_ms(modules, preload))
        for entry in ENTRIES:
            for root in roots:
                entry_rows[entry.name, root].append(entry_run(entry, root))

    print(f"stacks, import only ({args.runs} fresh processes each)")
    for (name, when), times in stack_times.items():
        print(f"  {name:15} {when:25} {spread(times)}")
    print(f"\nfunction files (target: import under {TARGET_MS:.0f} ms)")
    for root in roots:
        print(f"  {root}")
        for entry in ENTRIES:
            rows = entry_rows[entry.name, root]
            imports = [float(row["import_ms"]) for row in rows]  # type: ignore[arg-type]
            firsts = [float(row["first_ms"]) for row in rows]  # type: ignore[arg-type]
            status = rows[-1]["status"]
            starlette = "starlette loaded" if rows[-1]["starlette"] else "no starlette"
            print(f"    api/{entry.name + '.py':20} import        {spread(imports)}")
            print(f"    {'':24} first request {spread(firsts)}  {status}, {starlette}")
    if len(roots) == 2:
        print(f"  ratio {roots[0].name} / {roots[1].name}, per round (median, min, max)")
        for entry in ENTRIES:
            ours, theirs = entry_rows[entry.name, roots[0]], entry_rows[entry.name, roots[1]]
            for field in ("import_ms", "first_ms"):
                ratios = [
                    float(a[field]) / float(b[field])  # type: ignore[arg-type]
                    for a, b in zip(ours, theirs, strict=True)
                ]
                figure = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}, {max(ratios):.2f})"
                print(f"    api/{entry.name + '.py':20} {field[:-3]:14} {figure}")
    if args.tree:
        for modules in (STARLETTE, OURS):
            code = "import " + ", ".join(modules)
            result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
                [sys.executable, "-X", "importtime", "-c", code],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,
                env={"PYTHONPATH": ":".join(PATHS)},
            )
            lines = [line for line in result.stderr.splitlines() if "|" in line]
            print("\n" + "\n".join(lines[-12:]))


if __name__ == "__main__":
    main()
