"""The two twins offer one API: every public call of the async objects (and each
constructor, named ``Class.__init__``) exists in ``drainpipe.sync`` with the same
parameters and defaults, except where docs/sync.md's table
"Where the twins differ" names the call. The table is read by this test, so a new async
call without its sync twin fails here until it is built or the docs say why not, and a row
that no longer names a difference fails too.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import drainpipe
from drainpipe import sync
from drainpipe.agents import AgentInbox

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sync.md"

# (name in the table, async object, sync object)
PAIRS: list[tuple[str, Any, Any]] = [
    ("Jobs", drainpipe.Jobs, sync.Jobs),
    ("Queue", drainpipe.Queue, sync.Queue),
    ("Idempotency", drainpipe.Idempotency, sync.Idempotency),
    ("WebhookInbox", drainpipe.WebhookInbox, sync.WebhookInbox),
    # what a webhook handler gets: checkpoint without await in the sync twin
    ("WebhookMessage", drainpipe.WebhookMessage, sync.WebhookMessage),
    ("ManagementClient", drainpipe.ManagementClient, sync.ManagementClient),
    ("Lease", drainpipe.Lease, sync.Lease),
    # the agent inbox's Python calls, and one inbox's pulls
    ("AgentInboxes", drainpipe.AgentInboxes, sync.AgentInboxes),
    ("AgentInbox", AgentInbox, sync.AgentInbox),
    # a handler's job: the durable step calls, without await in the sync twin
    ("Job", drainpipe.Job, sync.Job),
]
FUNCTIONS: list[tuple[str, Any, Any]] = [
    ("lease", drainpipe.lease, sync.lease),
    ("with_lease", drainpipe.with_lease, sync.with_lease),
]


def _public(cls: Any) -> dict[str, Any]:
    """The public calls and properties, and the constructor (as ``__init__``)."""
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if (name == "__init__" or not name.startswith("_"))
        and (callable(member) or isinstance(member, property))
    }


def _parameters(member: Any) -> list[tuple[str, str, str]] | None:
    if isinstance(member, property) or not callable(member):
        return None
    try:
        signature = inspect.signature(member)
    except (TypeError, ValueError):
        return None
    return [
        (p.name, p.kind.name, "" if p.default is inspect.Parameter.empty else repr(p.default))
        for p in signature.parameters.values()
        if p.name != "self"
    ]


def differences() -> set[str]:
    found: set[str] = set()
    for label, async_obj, sync_obj in PAIRS:
        async_members, sync_members = _public(async_obj), _public(sync_obj)
        for name in async_members.keys() - sync_members.keys():
            found.add(f"{label}.{name}")
        for name in async_members.keys() & sync_members.keys():
            if _parameters(async_members[name]) != _parameters(sync_members[name]):
                found.add(f"{label}.{name}")
    for label, async_fn, sync_fn in FUNCTIONS:
        if _parameters(async_fn) != _parameters(sync_fn):
            found.add(label)
    return found


def documented() -> set[str]:
    text = DOCS.read_text()
    section = text.split("## Where the twins differ", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Za-z_.]+)`", section, flags=re.MULTILINE))


def test_every_difference_between_the_twins_is_named_in_the_docs() -> None:
    undocumented = sorted(differences() - documented())
    assert not undocumented, (
        f"async calls without a matching sync twin: {undocumented}; build them in "
        "drainpipe.sync or add a row to docs/sync.md's 'Where the twins differ'"
    )


def test_the_docs_name_no_difference_that_is_gone() -> None:
    stale = sorted(documented() - differences())
    assert not stale, f"docs/sync.md names differences that no longer exist: {stale}"


def test_the_comparison_sees_a_parameter_that_differs() -> None:
    async def a(self: Any, queue: str, *, max_attempts: int | None = None) -> None: ...

    def b(self: Any, queue: str, *, max_attempts: int = 5) -> None: ...

    assert _parameters(a) != _parameters(b)
