"""Call sites call the driver; they do not ask a backend what it can do.

What a reduced backend lacks is stated in one module, ``drainpipe/backends/reduced.py``.
Outside it no code tests a backend against a ``Supports*`` protocol or probes it for an
operation by name, and the few places that choose another path when the driver lacks an
operation (rather than letting its stated answer stand) are listed here with the reason.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from drainpipe.backends.driver import OPERATIONS

LIB = Path(__file__).resolve().parents[2] / "lib" / "drainpipe"
THE_ONE_PLACE = LIB / "backends" / "reduced.py"
OPERATION_NAMES = (*OPERATIONS, "send", "read", "complete", "fail", "extend")

CAPABILITY_ISINSTANCE = re.compile(r"isinstance\([^)]*Supports\w*")
# a backend or driver probed by name (the engine's own sources have optional hooks of their
# own, some with the same names: those are no backend's capabilities)
PROBE = re.compile(
    r"(?:getattr|hasattr)\([\w.]*(?:backend|driver)\w*,\s*\"(" + "|".join(OPERATION_NAMES) + r")\""
)
LACKS = re.compile(r"\.lacks\b")

#: the call sites that read ``driver.lacks`` to take another path, and why
CHOSEN_PATHS = {
    # steps and kept results only on drivers that record them: without, job.step says
    # STEPS_UNAVAILABLE and a handler's return value is not kept
    "jobs/worker.py": 2,  # ... and a lost lease is explained only from a record
    "jobs/guard.py": 1,  # an attempt window is enforced only where records say when it began
    "sync/policies.py": 1,  # ... generated from it (the sync twin's SQL driver lacks nothing)
    "jobs/replay_calls.py": 1,  # a storage that only counts its replays answers with the count
    "sync/replays.py": 1,  # ... generated from it (the sync twin's SQL driver lacks nothing)
    "jobs/executor.py": 1,  # a coded completion on a driver without codes is CODE_NOT_SUPPORTED
    "jobs/drain_route.py": 1,  # no schedule run (and no answer counted) without schedules
    "testing.py": 1,  # the conformance kit skips the record checks without records
}


def _sources() -> list[Path]:
    return sorted(path for path in LIB.rglob("*.py") if path != THE_ONE_PLACE)


def _strip_comments_and_docstrings(text: str) -> str:
    text = re.sub(r'"""(?:.|\n)*?"""', "", text)
    return re.sub(r"#.*", "", text)


def test_no_capability_isinstance_outside_the_reduced_backend() -> None:
    found = [
        f"{path.relative_to(LIB)}: {match.group(0)}"
        for path in _sources()
        for match in CAPABILITY_ISINSTANCE.finditer(
            _strip_comments_and_docstrings(path.read_text())
        )
    ]
    assert found == []


def test_no_call_site_probes_a_backend_for_an_operation() -> None:
    found = [
        f"{path.relative_to(LIB)}: {match.group(0)}"
        for path in _sources()
        if "backends" not in path.relative_to(LIB).parts  # drivers describe themselves
        for match in PROBE.finditer(_strip_comments_and_docstrings(path.read_text()))
    ]
    assert found == []


def test_only_the_listed_call_sites_choose_a_path_by_what_the_driver_lacks() -> None:
    uses = Counter(
        path.relative_to(LIB).as_posix()
        for path in _sources()
        if "backends" not in path.relative_to(LIB).parts
        for _ in LACKS.finditer(_strip_comments_and_docstrings(path.read_text()))
    )
    assert dict(uses) == CHOSEN_PATHS


def test_the_checks_see_what_they_look_for() -> None:
    sample = 'if isinstance(backend, SupportsStats):\n    x = getattr(backend, "emit", None)\n'
    assert CAPABILITY_ISINSTANCE.search(sample) is not None
    assert PROBE.search(sample) is not None
