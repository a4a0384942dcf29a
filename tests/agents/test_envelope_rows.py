"""Envelopes built from the compact rows (ops.EVENT_COLUMNS: the body as JSON text, the
token as bytes) are the envelopes of before: exact big integers, a JSON null body shown as
an absent one, the lease id of the delivery's token, the same over next, claim and peek, on
a pool of the caller's (its JSON loaders not set up) and on drainpipe's own."""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool

from drainpipe import AgentInboxes
from drainpipe.agents.statements import LeaseCodec
from tests.agents.conftest import SECRET, Setup

BIG = 123456789012345678901234567890


async def test_bodies_read_from_text_keep_big_integers_and_text_exact(setup: Setup) -> None:
    body = {"big": BIG, "float": 0.1, "text": 'é\u2028"q"', "list": [1, None, True]}
    await setup.store(body)
    # a body of JSON null: shown as no view, as it always was
    await setup.webhooks.store(id="null-body", payload=None, type="invoice.paid")
    setup.clock.advance(1)
    inbox = setup.agents.inbox(setup.inbox_id)
    first, null = await inbox.next(max=2)
    assert first.view == body and first.truncated is False
    assert (null.view, null.truncated) == (None, True)
    peeked = (await inbox.events()).items
    assert [item.view for item in peeked] == [body, None]


async def test_the_lease_id_carries_the_token_the_database_minted(setup: Setup) -> None:
    await setup.store()
    inbox = setup.agents.inbox(setup.inbox_id)
    [event] = await inbox.next()
    async with await psycopg.AsyncConnection.connect(setup.url) as conn:
        row = await (
            await conn.execute("SELECT id, delivery, lease_token FROM drainpipe.agent_events")
        ).fetchone()
    assert row is not None
    fresh = LeaseCodec(SECRET.encode())  # reads by the MAC: nothing remembered
    assert fresh.read(event.lease_id) == (row[0], row[1], row[2].bytes)
    assert event.id == f"evt_{row[0]}"


async def test_a_pool_of_the_callers_gets_the_same_envelopes(setup: Setup) -> None:
    await setup.store({"big": BIG, "n": 1})
    await setup.store({"big": BIG, "n": 2})
    async with AsyncConnectionPool(setup.url, min_size=1, max_size=2, open=False) as pool:
        theirs = AgentInboxes(pool, lease_secret=SECRET, now=setup.clock)
        try:
            [mine] = await setup.agents.inbox(setup.inbox_id).next()
            [other] = (
                await theirs.inbox(setup.inbox_id).claim([f"evt_{int(mine.id[4:]) + 1}"])
            ).claimed
            assert mine.view == {"big": BIG, "n": 1} and other.view == {"big": BIG, "n": 2}
            assert (mine.source, mine.type, mine.verified) == (
                other.source, other.type, other.verified,
            )  # fmt: skip
            assert type(mine.received_at) is type(other.received_at)
            # each acks what the other handed out: no memory of it, the MAC decides
            assert await theirs.ack(mine.id, mine.lease_id or "")
            assert await setup.agents.ack(other.id, other.lease_id or "")
        finally:
            await theirs.close()
