"""The sync twin: drainpipe from synchronous code (Django, Flask, plain Lambda handlers).

    from drainpipe import sync

    jobs = sync.Jobs(dsn_or_pool_or_connection, {"emails": Email})
    jobs.enqueue("emails", Email(to="a@example.com"))        # joins a connection's transaction
    jobs.drain("emails", send)                                # send(payload, job): a plain function
    # ...whose job (a sync.Job) has job.step / sleep / wait_for / spawn / join, no await
    idem = sync.Idempotency(db); app.wsgi_app = idem.wrap_wsgi(app.wsgi_app)
    with sync.lease(db, "nightly") as held: ...
    inbox = sync.WebhookInbox(db, source="billing", secrets=[...])
    status, headers, body = inbox.receive(request.headers, request.get_data())
    inbox.process(handle)                                     # handle(message): a plain function
    agents = sync.AgentInboxes(db, lease_secret=secret)
    [event] = agents.inbox(inbox_id).next(wait=10); agents.ack(event.id, event.lease_id)
    with sync.ManagementClient(base_url, token) as client: client.replay("emails", 42)

The same SQL (:mod:`drainpipe.statements`), the same checks (the ``rules`` modules the async
objects use), the same errors (:func:`drainpipe.db.translate_error`) and results as the
async API. The jobs storage, the record, pause, replay, archive, event and schedule calls
of ``Jobs``, the management client, leases, the database halves of idempotency, the webhook
inbox and the agent inbox are generated from their async modules by ``./scripts/sync-twin``
(each says so in its first line); the rest is what a thread does differently
(docs/sync.md). No asyncio: ``import drainpipe.sync`` loads neither asyncio nor psycopg nor
pydantic; they load on first use (psycopg itself imports asyncio, but no event loop runs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agents import AgentInbox, AgentInboxes
    from .idempotency import Idempotency
    from .inbox import WebhookInbox, WebhookMessage
    from .jobs import Jobs, Queue
    from .leases import Lease, lease, with_lease
    from .management import ManagementClient
    from .steps import SyncJob as Job
    from .worker import SyncHandler, SyncOnError

__all__ = [
    "AgentInbox",
    "AgentInboxes",
    "Idempotency",
    "Job",
    "Jobs",
    "Lease",
    "ManagementClient",
    "Queue",
    "SyncHandler",
    "SyncOnError",
    "WebhookInbox",
    "WebhookMessage",
    "lease",
    "with_lease",
]

_EXPORTS = {
    "AgentInbox": "agents",
    "AgentInboxes": "agents",
    "Idempotency": "idempotency",
    "Job": "steps",
    "Jobs": "jobs",
    "Lease": "leases",
    "ManagementClient": "management",
    "Queue": "jobs",
    "SyncHandler": "worker",
    "SyncOnError": "worker",
    "WebhookInbox": "inbox",
    "WebhookMessage": "inbox",
    "lease": "leases",
    "with_lease": "leases",
}

#: exported under another name than the module's
_NAMES = {"Job": "SyncJob"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), _NAMES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
