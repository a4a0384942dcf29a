"""Telemetry costs nothing until the application loads OpenTelemetry itself."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import asyncio, sys
import drainpipe
from drainpipe.testing import MemoryBackend

async def main():
    jobs = drainpipe.Jobs(MemoryBackend(), {"q": dict})
    await jobs.enqueue("q", {"n": 1})
    await jobs.drain("q", lambda payload, job: None)

asyncio.run(main())
print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
"""


def test_enqueue_and_drain_do_not_import_the_api_an_application_never_loaded() -> None:
    # opentelemetry-api is installed here (the dev extra): merely being installed, as a
    # dependency of something else, must not cost a function's first enqueue its import
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
