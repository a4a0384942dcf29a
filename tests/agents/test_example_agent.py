"""examples/agent/agent.py, run as a process against the agent inbox on a real uvicorn
server: it pulls, acts on verified events only, and acks every one with its lease."""

from __future__ import annotations

import asyncio
import os
import sys

import psycopg

from tests.agents.conftest import Setup
from tests.agents.test_stream import TOKEN, serve
from tests.conftest import ROOT


async def test_the_example_agent_pulls_acts_and_acks(setup: Setup) -> None:
    await setup.webhooks.store(id="a", payload={"amount": 1}, type="invoice.paid", verified=True)
    await setup.webhooks.store(id="b", payload={"amount": 2}, type="invoice.paid")
    setup.clock.advance(1)  # the inbox's clock: past their arrival
    async with serve(setup.agents) as base:
        env = {
            **os.environ,
            "AGENT_URL": base.replace("ws://", "http://"),
            "AGENT_TOKEN": TOKEN,
            "AGENT_INBOX": setup.inbox_id,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "examples/agent/agent.py"), "--once",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[-1] == "handled 2 events", lines
    async with await psycopg.AsyncConnection.connect(setup.url) as conn:
        rows = await (
            await conn.execute("SELECT state, outcome FROM drainpipe.agent_events ORDER BY id")
        ).fetchall()
    assert rows == [
        ("acked", {"handled": "invoice.paid", "fields": ["amount"]}),
        ("acked", {"skipped": "unverified"}),
    ]
