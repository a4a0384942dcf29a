"""drainpipe: background jobs, schedules, webhook inboxes, idempotency keys and leases on
the Postgres you already have.

Names are imported lazily: ``import drainpipe`` costs almost nothing, and a serverless
function pays for psycopg, pydantic or a web framework only when it uses them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Skip": "codes",
    "Suspend": "codes",
    "Step": "models",
    "ChildOutcome": "models",
    "Position": "models",
    "JobRecord": "models",
    "JobPage": "models",
    "Discard": "codes",
    "Attempt": "models",
    "Actor": "models",
    "AgentInboxes": "agents",
    "Begin": "idempotency",
    "DeadJob": "models",
    "DevDrain": "jobs.dev_drain",
    "DrainRoute": "jobs.drain_route",
    "DrainpipeError": "errors",
    "EnsureResult": "schedules",
    "Idempotency": "idempotency",
    "InboxEntry": "webhooks",
    "Job": "models",
    "JobContext": "models",
    "Jobs": "jobs",
    "Keyring": "keyring",
    "Lease": "leases",
    "LeaseOutcome": "leases",
    "ManagementClient": "console.client",
    "PostgrestBackend": "backends.postgrest",
    "Principal": "principals",
    "Queue": "jobs",
    "QueueBackend": "backends",
    "QueuePolicy": "jobs",
    "Rate": "jobs",
    "QueueStats": "models",
    "ReplayReport": "models",
    "Retry": "errors",
    "ScheduleDef": "schedules",
    "ScheduleInfo": "schedules",
    "Stored": "webhooks",
    "WebhookInbox": "webhooks",
    "WebhookMessage": "webhooks",
    "WorkReport": "models",
    "assert_cron": "schedules.cron",
    "bearer_tokens": "principals",
    "dev_drain": "jobs.dev_drain",
    "dev_drain_secret": "jobs.dev_drain",
    "install": "sqlmodules",
    "lease": "leases",
    "next_cron_run": "schedules.cron",
    "verify": "sqlmodules",
    "with_lease": "leases",
}

__all__ = [
    "Actor",
    "AgentInboxes",
    "Attempt",
    "Begin",
    "ChildOutcome",
    "DeadJob",
    "DevDrain",
    "Discard",
    "DrainRoute",
    "DrainpipeError",
    "EnsureResult",
    "Idempotency",
    "InboxEntry",
    "Job",
    "JobContext",
    "JobPage",
    "JobRecord",
    "Jobs",
    "Keyring",
    "Lease",
    "LeaseOutcome",
    "ManagementClient",
    "Position",
    "PostgrestBackend",
    "Principal",
    "Queue",
    "QueueBackend",
    "QueuePolicy",
    "QueueStats",
    "Rate",
    "ReplayReport",
    "Retry",
    "ScheduleDef",
    "ScheduleInfo",
    "Skip",
    "Step",
    "Stored",
    "Suspend",
    "WebhookInbox",
    "WebhookMessage",
    "WorkReport",
    "assert_cron",
    "bearer_tokens",
    "codes",
    "dev_drain",
    "dev_drain_secret",
    "install",
    "lease",
    "next_cron_run",
    "sync",
    "testing",
    "verify",
    "with_lease",
]

if TYPE_CHECKING:
    from . import codes, sync, testing
    from .agents import AgentInboxes
    from .backends import QueueBackend
    from .backends.postgrest import PostgrestBackend
    from .codes import Discard, Skip, Suspend
    from .console.client import ManagementClient
    from .errors import DrainpipeError, Retry
    from .idempotency import Begin, Idempotency
    from .jobs import Jobs, Queue, QueuePolicy, Rate
    from .jobs.dev_drain import DevDrain, dev_drain, dev_drain_secret
    from .jobs.drain_route import DrainRoute
    from .keyring import Keyring
    from .leases import Lease, LeaseOutcome, lease, with_lease
    from .models import (
        Actor,
        Attempt,
        DeadJob,
        Job,
        JobContext,
        JobPage,
        JobRecord,
        Position,
        QueueStats,
        ReplayReport,
        WorkReport,
    )
    from .principals import Principal, bearer_tokens
    from .schedules import EnsureResult, ScheduleDef, ScheduleInfo
    from .schedules.cron import assert_cron, next_cron_run
    from .sqlmodules import install, verify
    from .webhooks import InboxEntry, Stored, WebhookInbox, WebhookMessage


def __getattr__(name: str) -> Any:
    if name in ("testing", "codes", "sync"):
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'drainpipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
