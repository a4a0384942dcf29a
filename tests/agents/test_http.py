"""The agent inbox over HTTP (httpx's ASGI transport on the Starlette app; real Postgres):
routes, bodies, Problem Details codes, and who may touch which inbox and event."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from drainpipe import Principal, bearer_tokens
from tests.agents.conftest import Setup

AGENT = "agent-token-0123456789abcdef"
OTHER = "other-token-0123456789abcdef"
OUTSIDER = "outsider-token-0123456789abc"


@pytest.fixture
async def client(setup: Setup) -> AsyncIterator[httpx.AsyncClient]:
    authorize = bearer_tokens(
        {
            AGENT: Principal("agent", inboxes=[setup.inbox_id]),
            OTHER: Principal("other"),
            OUTSIDER: Principal("outsider", inboxes=["inb_elsewhere"]),
        }
    )
    app = setup.agents.app(authorize=authorize, budget=5.0)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://agents", headers={"authorization": f"Bearer {AGENT}"}
    ) as http:
        yield http


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_next_ack_repeat_and_a_stale_lease(setup: Setup, client: httpx.AsyncClient) -> None:
    await setup.store()
    answer = await client.get(f"/v1/agent/inbox/{setup.inbox_id}/next", params={"max": 10})
    assert answer.status_code == 200
    [event] = answer.json()["events"]
    ack = await client.post(
        f"/v1/events/{event['id']}/ack", json={"lease_id": event["lease_id"], "outcome": "ok"}
    )
    assert ack.status_code == 200
    assert ack.json() == {"id": event["id"], "state": "acked", "lease_until": None}
    again = await client.post(f"/v1/events/{event['id']}/ack", json={"lease_id": event["lease_id"]})
    assert again.status_code == 200 and again.json()["state"] == "acked"
    late = await client.post(
        f"/v1/events/{event['id']}/release", json={"lease_id": event["lease_id"]}
    )
    assert late.status_code == 409
    assert late.headers["content-type"] == "application/problem+json"
    assert late.json()["code"] == "LEASE_LOST"


async def test_release_and_extend_bodies(setup: Setup, client: httpx.AsyncClient) -> None:
    await setup.store()
    [event] = (await client.get(f"/v1/agent/inbox/{setup.inbox_id}/next")).json()["events"]
    path = f"/v1/events/{event['id']}"
    extended = await client.post(
        f"{path}/extend", json={"lease_id": event["lease_id"], "seconds": 120}
    )
    assert extended.status_code == 200
    assert extended.json()["state"] == "leased" and extended.json()["lease_until"] is not None
    bad = await client.post(f"{path}/extend", json={"lease_id": event["lease_id"], "seconds": 0})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_PARAMETER"
    missing = await client.post(f"{path}/extend", json={"lease_id": event["lease_id"]})
    assert missing.status_code == 400
    released = await client.post(
        f"{path}/release",
        json={"lease_id": event["lease_id"], "delay_seconds": 5, "error": "later"},
    )
    assert released.json() == {"id": event["id"], "state": "pending", "lease_until": None}


@pytest.mark.parametrize(
    "query",
    [{"max": "11"}, {"max": "0"}, {"max": "x"}, {"wait": "31"}, {"wait": "-1"}, {"wait": "nan"},
     {"order": "random"}, {"ack": "auto"}],
)  # fmt: skip
async def test_bad_pull_parameters_are_400(
    setup: Setup, client: httpx.AsyncClient, query: dict[str, str]
) -> None:
    answer = await client.get(f"/v1/agent/inbox/{setup.inbox_id}/next", params=query)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "INVALID_PARAMETER"


async def test_an_ack_mode_not_allowed_is_400(setup: Setup, client: httpx.AsyncClient) -> None:
    inbox_id = await setup.agents.create("manual-only", allowed_ack=["manual"])
    answer = await client.get(f"/v1/agent/inbox/{inbox_id}/next?ack=pickup", headers=as_(OTHER))
    assert answer.status_code == 400 and answer.json()["code"] == "ACK_MODE_NOT_ALLOWED"


async def test_who_may_touch_what(setup: Setup, client: httpx.AsyncClient) -> None:
    await setup.store()
    inbox = f"/v1/agent/inbox/{setup.inbox_id}"
    nobody = await client.get(
        f"{inbox}/next", headers={"authorization": "Bearer wrong-token-0000000000"}
    )
    assert nobody.status_code == 401 and nobody.json()["code"] == "UNAUTHORIZED"
    outside = await client.get(f"{inbox}/next", headers=as_(OUTSIDER))
    assert outside.status_code == 403 and outside.json()["code"] == "INBOX_FORBIDDEN"
    assert (await client.get(f"{inbox}/events", headers=as_(OUTSIDER))).status_code == 403
    claim = await client.post(f"{inbox}/claim", json={"event_ids": []}, headers=as_(OUTSIDER))
    assert claim.status_code == 403
    unknown = await client.get("/v1/agent/inbox/inb_unknown/next", headers=as_(OTHER))
    assert unknown.status_code == 404 and unknown.json()["code"] == "INBOX_NOT_FOUND"
    [event] = (await client.get(f"{inbox}/next")).json()["events"]
    # an event outside the principal's inboxes is not found, exactly like a missing one
    for path in ("ack", "release", "extend"):
        hidden = await client.post(
            f"/v1/events/{event['id']}/{path}",
            json={"lease_id": event["lease_id"], "seconds": 10},
            headers=as_(OUTSIDER),
        )
        assert hidden.status_code == 404 and hidden.json()["code"] == "EVENT_NOT_FOUND"
    missing = await client.post("/v1/events/evt_987654/ack", json={"lease_id": event["lease_id"]})
    assert missing.status_code == 404 and missing.json()["code"] == "EVENT_NOT_FOUND"
    assert (
        await client.get(f"/v1/events/{event['id']}/raw", headers=as_(OUTSIDER))
    ).status_code == 404
    assert (await client.get("/v1/events/nonsense/raw")).status_code == 404
    # nothing an outsider did changed the event
    ack = await client.post(f"/v1/events/{event['id']}/ack", json={"lease_id": event["lease_id"]})
    assert ack.status_code == 200


async def test_raw_is_an_attachment_behind_the_inbox_permission(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    await setup.store({"text": "<script>alert(1)</script>"})
    [event] = (await client.get(f"/v1/agent/inbox/{setup.inbox_id}/events")).json()["events"]
    raw = await client.get(f"/v1/events/{event['id']}/raw")
    assert raw.status_code == 200
    assert raw.headers["content-disposition"] == f'attachment; filename="{event["id"]}.json"'
    assert raw.headers["content-type"] == "application/octet-stream"
    assert raw.headers["x-content-type-options"] == "nosniff"
    assert raw.json() == {"text": "<script>alert(1)</script>"}


async def test_peek_and_claim_bodies(setup: Setup, client: httpx.AsyncClient) -> None:
    for _ in range(3):
        await setup.store()
    inbox = f"/v1/agent/inbox/{setup.inbox_id}"
    page = (await client.get(f"{inbox}/events", params={"limit": 2})).json()
    assert len(page["events"]) == 2 and page["next_cursor"]
    assert all(e["lease_id"] is None for e in page["events"])
    rest = (await client.get(f"{inbox}/events", params={"cursor": page["next_cursor"]})).json()
    assert len(rest["events"]) == 1 and rest["next_cursor"] is None
    tampered = await client.get(
        f"{inbox}/events", params={"cursor": page["next_cursor"][:-2] + "xx"}
    )
    assert tampered.status_code == 400 and tampered.json()["code"] == "CURSOR_INVALID"
    ids = [e["id"] for e in page["events"]]
    claimed = (await client.post(f"{inbox}/claim", json={"event_ids": [*ids, "evt_5555"]})).json()
    assert [e["id"] for e in claimed["claimed"]] == ids
    assert claimed["unavailable"] == [] and claimed["not_found"] == ["evt_5555"]
    again = (await client.post(f"{inbox}/claim", json={"event_ids": ids})).json()
    assert again["claimed"] == [] and again["unavailable"] == ids
    for body in ({"event_ids": "evt_1"}, {"event_ids": []}, {}):
        assert (await client.post(f"{inbox}/claim", json=body)).status_code == 400
    broken = await client.post(f"{inbox}/claim", content=b"{not json")
    assert broken.status_code == 400 and broken.json()["code"] == "INVALID_BODY"


async def test_an_idempotency_key_is_scoped_to_the_principal(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    for _ in range(4):
        await setup.store()
    path = f"/v1/agent/inbox/{setup.inbox_id}/next?max=2"
    key = {"idempotency-key": "pull-1"}
    first = (await client.get(path, headers=key)).json()["events"]
    again = (await client.get(path, headers=key)).json()["events"]
    assert again == first and len(first) == 2
    theirs = (await client.get(path, headers={**key, **as_(OTHER)})).json()["events"]
    assert {e["id"] for e in theirs}.isdisjoint({e["id"] for e in first})
    await client.post(f"/v1/events/{first[0]['id']}/ack", json={"lease_id": first[0]["lease_id"]})
    consumed = await client.get(path, headers=key)
    assert consumed.status_code == 409 and consumed.json()["code"] == "PULL_CONSUMED"


async def test_an_empty_long_poll_ends_within_the_budget(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    import time

    started = time.monotonic()
    answer = await client.get(f"/v1/agent/inbox/{setup.inbox_id}/next", params={"wait": 30})
    took = time.monotonic() - started
    assert answer.status_code == 200 and answer.json() == {"events": []}
    assert 3.5 <= took < 5.0  # budget 5 minus the 1 s reserve, never the 30 s asked for


async def test_orders_pickup_and_the_envelope_over_http(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    inbox_id = await setup.agents.create("http-orders", priority_path="data.severity")
    await setup.agents.subscribe(inbox_id, "billing")
    for severity in (1, 9, 5):
        await setup.store({"data": {"severity": severity}})
    path = f"/v1/agent/inbox/{inbox_id}"
    other = as_(OTHER)
    ids = [e["id"] for e in (await client.get(f"{path}/events", headers=other)).json()["events"]]
    [newest] = (await client.get(f"{path}/next?order=lifo", headers=other)).json()["events"]
    assert newest["id"] == ids[2]
    assert set(newest) == {
        "id", "lease_id", "delivery", "ack", "source", "type", "received_at", "verified",
        "view", "truncated", "untrusted",
    }  # fmt: skip
    [urgent] = (await client.get(f"{path}/next?order=priority", headers=other)).json()["events"]
    assert urgent["id"] == ids[1] and urgent["view"] == {"data": {"severity": 9}}
    [oldest] = (await client.get(f"{path}/next?ack=pickup", headers=other)).json()["events"]
    assert oldest["id"] == ids[0] and oldest["lease_id"] is None and oldest["ack"] == "pickup"
    # a lease of another event is foreign: refused, nothing changed
    foreign = await client.post(
        f"/v1/events/{newest['id']}/ack", json={"lease_id": urgent["lease_id"]}, headers=other
    )
    assert foreign.status_code == 409 and foreign.json()["code"] == "LEASE_LOST"
    for event in (newest, urgent):
        ack = await client.post(
            f"/v1/events/{event['id']}/ack", json={"lease_id": event["lease_id"]}, headers=other
        )
        assert ack.status_code == 200
    assert (await client.get(f"{path}/next", headers=other)).json() == {"events": []}
