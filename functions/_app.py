"""The example app shared by the functions in this folder: its queues and handlers.

Files starting with ``_`` are not deployed as functions (Vercel's convention). The
deployed entry points are ``api/*.py`` (the folder Vercel turns into functions); each
imports its app from a module here.

Cold starts pay for every import: the payload type is a dataclass, so importing a
function loads no pydantic; drainpipe builds the validator when the first job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drainpipe import Job, WebhookMessage

log = logging.getLogger("drainpipe.functions")


# -- the example's queues -------------------------------------------------------------------


@dataclass(frozen=True)
class Email:
    to: str
    subject: str = ""


QUEUES: dict[str, Any] = {"emails": Email}


async def send_email(payload: Email, job: Job[Email]) -> None:
    # a real app would call its mail provider here; raising would retry the job
    log.info(
        "emails: sending %r to %s (job %s, attempt %s)",
        payload.subject,
        payload.to,
        job.id,
        job.attempts,
    )


HANDLERS: dict[str, Callable[[Any, Job[Any]], Awaitable[Any]]] = {"emails": send_email}

# The webhook inbox that functions/billing_webhook.py fills; the drain route processes it.
BILLING_SOURCE = "billing"


async def handle_billing_event(message: WebhookMessage) -> None:
    # a real app would update its records here; raising would retry the message
    log.info("billing: %s %s (attempt %s)", message.type, message.message_id, message.attempts)


# The agent inbox that functions/agent_inbox.py serves: every billing webhook becomes an
# event an agent pulls (created on the function's first request; create is idempotent).
AGENT_INBOX = "billing-agent"


async def ensure_agent_inbox(agents: Any) -> str:
    """Create the example's agent inbox (or find it) and subscribe it to the billing
    webhooks; returns its id. Drives work: manual acks only (no pickup)."""
    inbox_id: str = await agents.create(AGENT_INBOX, allowed_ack=["manual"], lease_seconds=120)
    await agents.subscribe(inbox_id, BILLING_SOURCE)
    return inbox_id
