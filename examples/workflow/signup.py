"""A signup workflow that outlives its function: a drain route is its whole runtime.

    DATABASE_URL=postgresql://... CRON_SECRET=... uvicorn examples.workflow.signup:app
    drainpipe dev        # or any cron: GET /  with  Authorization: Bearer $CRON_SECRET

``onboard`` creates the user and sends the welcome mail (steps: run once), sleeps three
days, waits up to two days for the mail provider's "clicked" webhook, then fans out two
thumbnails and gathers them. Each call of the route runs what is due and returns; no
worker stays up in between. The mail provider's webhooks land in a ``WebhookInbox`` that
the same route processes; a click becomes ``jobs.emit("email.clicked", user_id)``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import drainpipe

QUEUES: dict[str, Any] = {"signups": dict[str, Any], "thumbnails": dict[str, Any]}
SENT: list[str] = []  # what the example "sent" (a real app calls its mail provider)


def create_user(email: str) -> dict[str, Any]:
    SENT.append(f"created {email}")
    return {"id": abs(hash(email)) % 10_000, "email": email}


def send_welcome(job: drainpipe.Job[Any], user: dict[str, Any]) -> str:
    # the key is the same on every run of this step: the provider sends one mail
    key = f"job-{job.queue}-{job.id}-welcome"
    SENT.append(f"welcome {user['email']} ({key})")
    return key


async def onboard(payload: dict[str, Any], job: drainpipe.Job[Any]) -> dict[str, Any]:
    user = await job.step("create-user", create_user, payload["email"])
    await job.step("welcome-mail", send_welcome, job, user)
    await job.sleep(timedelta(days=3))
    click = await job.wait_for("email.clicked", key=str(user["id"]), timeout=timedelta(days=2))
    sizes = [64, 256]
    kids = await job.spawn_many("thumbnails", [{"user": user["id"], "size": s} for s in sizes])
    outcomes = await job.join(kids)
    return {
        "user": user["id"],
        "clicked": click is not None,
        "thumbs": [o.result for o in outcomes],
    }


async def thumbnail(payload: dict[str, Any], job: drainpipe.Job[Any]) -> str:
    return f"thumb-{payload['user']}-{payload['size']}.png"


def build(db: Any, secret: str) -> tuple[drainpipe.Jobs, drainpipe.WebhookInbox, Any]:
    """The jobs, the mail provider's webhook inbox, and the drain route that runs both."""
    jobs = drainpipe.Jobs(db, QUEUES)
    mail = drainpipe.WebhookInbox(db, source="mail")

    async def on_mail_event(message: Any) -> None:
        if message.type == "email.clicked":
            await jobs.emit("email.clicked", str(message.payload["user"]), message.payload)

    route = jobs.drain_route(
        secret=secret,
        handlers={"signups": onboard, "thumbnails": thumbnail},
        inboxes=[(mail, on_mail_event)],
    )
    return jobs, mail, route


if "DATABASE_URL" in os.environ:  # the deployable app; tests call build()
    app = build(os.environ["DATABASE_URL"], drainpipe.dev_drain_secret())[2]
