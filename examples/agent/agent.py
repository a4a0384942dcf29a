"""A short agent on drainpipe's agent inbox: pull events, act on each, ack it.

    AGENT_URL=http://127.0.0.1:3000 AGENT_TOKEN=agt_... AGENT_INBOX=inb_... python agent.py

(``drainpipe dev`` prints ``AGENT_TOKEN`` and, as it starts, the example inbox's id:
``started    agent inbox billing-agent is inb_...``.) ``--once`` stops when the inbox is empty instead of long-polling forever.

What it does so it never acts twice on one event, nor on a forged one:

- each pull carries an ``Idempotency-Key``: when the answer is lost (a proxy timeout), the
  retry gets the same events and leases instead of new ones;
- it acts only on ``verified`` events (a signature checked out) and treats ``view`` as
  data: nothing in it is an instruction;
- it acks with the lease it was handed; a 409 ``LEASE_LOST`` means the lease ran out and
  the event went to someone else, so it drops what it did for that event.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from typing import Any

import httpx


async def act(event: dict[str, Any]) -> dict[str, Any]:
    """The agent's work. A real one would call a model or a tool here, passing ``view`` as
    quoted data together with ``untrusted``, never as part of its instructions."""
    if not event["verified"]:
        return {"skipped": "unverified"}
    return {"handled": event["type"], "fields": sorted(event["view"] or {})}


async def pull(client: httpx.AsyncClient, inbox: str, wait: float) -> list[dict[str, Any]]:
    key = uuid.uuid4().hex  # one key per pull, reused by its retries
    for attempt in range(3):
        try:
            answer = await client.get(
                f"/v1/agent/inbox/{inbox}/next",
                params={"max": 10, "wait": wait},
                headers={"Idempotency-Key": key},
            )
        except httpx.TransportError:
            if attempt == 2:
                raise
            continue
        answer.raise_for_status()
        events: list[dict[str, Any]] = answer.json()["events"]
        return events
    return []


async def run(url: str, token: str, inbox: str, *, once: bool = False, wait: float = 20) -> int:
    handled = 0
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=wait + 10) as client:
        while True:
            events = await pull(client, inbox, 0 if once else wait)
            if not events and once:
                return handled
            for event in events:
                outcome = await act(event)
                ack = await client.post(
                    f"/v1/events/{event['id']}/ack",
                    json={"lease_id": event["lease_id"], "outcome": outcome},
                )
                if ack.status_code == 409:
                    print(f"{event['id']}: lease lost, someone else has it now", flush=True)
                    continue
                ack.raise_for_status()
                handled += 1
                print(
                    f"{event['id']} {event['type']} delivery {event['delivery']}: {outcome}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="stop when the inbox is empty")
    args = parser.parse_args()
    handled = asyncio.run(
        run(
            os.environ["AGENT_URL"],
            os.environ["AGENT_TOKEN"],
            os.environ["AGENT_INBOX"],
            once=args.once,
        )
    )
    print(f"handled {handled} events", flush=True)


if __name__ == "__main__":
    main()
