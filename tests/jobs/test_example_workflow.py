"""examples/workflow/signup.py driven only by ``drainpipe.dev_drain`` calling its drain
route over HTTP, on both storages: a step each run once, a three-day sleep (the time is
moved), a wait fed by a webhook through the same route, and a fan-out gathered by join."""

from __future__ import annotations

import importlib.util
from typing import Any

import drainpipe
from drainpipe.dev.server import start_server
from tests.conftest import ROOT
from tests.jobs.test_steps import move_time

SECRET = "w" * 64


def _example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "signup_example", ROOT / "examples" / "workflow" / "signup.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_signup_workflow_runs_on_the_dev_drain_loop_alone(
    jobs_db_url: str, backend_name: str
) -> None:
    example = _example()
    jobs, mail, route = example.build(jobs_db_url, SECRET)
    server = await start_server(route)
    answers: list[dict[str, Any]] = []
    dev = drainpipe.dev_drain(server.url + "/", SECRET)

    async def tick() -> None:
        response = await dev.tick()
        assert response is not None and response.status_code == 200, response
        answers.append(response.json())

    try:
        job_id = await jobs.enqueue("signups", {"email": "ann@example.com"})
        await tick()  # user created, welcome sent, asleep for three days
        record = await jobs.get("signups", job_id)
        assert record is not None and (record.state, record.waiting_for) == ("waiting", "time")
        await tick()  # nothing is due: nothing runs again
        await move_time(jobs_db_url, backend_name, "signups", job_id, 3 * 86400)
        await tick()  # awake: now waiting for the click
        record = await jobs.get("signups", job_id)
        assert record is not None and record.waiting_for == "event:email.clicked"
        user_id = example.create_user("ann@example.com")["id"]
        example.SENT.pop()  # that call was the test's, not the workflow's
        await mail.store(id="evt-1", payload={"user": user_id}, type="email.clicked")
        await tick()  # the route processes the webhook, which emits the click
        await tick()  # the workflow takes it, spawns the thumbnails; they run in this call
        await move_time(jobs_db_url, backend_name, "signups", job_id, 60)
        await tick()  # the join sees both children done
        record = await jobs.get("signups", job_id)
        assert record is not None and record.state == "succeeded", record
        assert await jobs.result("signups", job_id) == {
            "user": user_id,
            "clicked": True,
            "thumbs": [f"thumb-{user_id}-64.png", f"thumb-{user_id}-256.png"],
        }
        assert [line.split(" (")[0] for line in example.SENT] == [
            "created ann@example.com",
            "welcome ann@example.com",
        ]  # each step ran once over six calls
        assert record.attempts == 1
        assert [s.name for s in record.steps] == [
            "create-user",
            "welcome-mail",
            "sleep",
            "wait:email.clicked",
            "spawn:thumbnails",
            "join",
        ]
    finally:
        dev.stop()
        await server.stop()
        await jobs.close()
