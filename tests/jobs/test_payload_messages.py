"""A payload that fails its schema names the field in the message, wherever the message
shows: the Python API's error, an HTTP Problem's ``detail`` (served by uvicorn) and a dead
job's last error as ``drainpipe jobs dead`` prints it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import BaseModel

from drainpipe import DrainpipeError, Jobs
from drainpipe.cli import main
from drainpipe.dev.server import start_server
from drainpipe.serverless import Request, json_response, problem_response
from drainpipe.validation import issue_summary

MISSING_TO = 'Payload for queue "emails" is invalid: to: Field required'


class Email(BaseModel):
    to: str
    subject: str = ""


class Order(BaseModel):
    items: list[Email]


def test_the_summary_names_the_path_and_counts_the_rest() -> None:
    assert issue_summary([{"message": "Field required", "path": ["to"]}]) == "to: Field required"
    nested = [
        {"message": "Input should be a valid string", "path": ["items", 0, "to"]},
        {"message": "Field required", "path": ["items", 1, "to"]},
        {"message": "Field required", "path": ["items", 2, "to"]},
    ]
    assert issue_summary(nested) == "items.0.to: Input should be a valid string (and 2 more issues)"
    assert issue_summary(nested[:2]).endswith("(and 1 more issue)")
    assert issue_summary([{"message": "Input should be a valid dict", "path": []}]) == (
        "Input should be a valid dict"
    )
    assert issue_summary([], ValueError("no issues")) == "no issues"


async def test_the_python_api_names_the_field(db_url: str) -> None:
    jobs = Jobs(db_url, {"emails": Email, "orders": Order})
    try:
        with pytest.raises(DrainpipeError) as info:
            await jobs.enqueue("emails", {"subject": "hi"})
        assert str(info.value) == MISSING_TO
        assert info.value.issues == [{"message": "Field required", "path": ["to"]}]
        with pytest.raises(DrainpipeError) as info:
            await jobs.enqueue("orders", {"items": [{"to": "a@x"}, {"to": 3}]})
        assert str(info.value) == (
            'Payload for queue "orders" is invalid: items.1.to: Input should be a valid string'
        )
    finally:
        await jobs.close()


async def test_an_http_answer_names_the_field(db_url: str) -> None:
    jobs = Jobs(db_url, {"emails": Email})

    async def enqueue(scope: Any, receive: Any, send: Any) -> None:
        """What an app's enqueueing route does with the error: answer it as a Problem."""
        if scope["type"] != "http":
            return
        request = Request.from_asgi(scope, receive)
        try:
            job_id = await jobs.enqueue("emails", json.loads(await request.body()))
        except DrainpipeError as exc:
            await problem_response(exc, scope["path"])(scope, receive, send)
            return
        await json_response({"id": job_id}, 201)(scope, receive, send)

    server = await start_server(enqueue)
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            answer = await client.post("/emails", json={"subject": "hi"})
    finally:
        await server.stop()
        await jobs.close()
    body = answer.json()
    assert (answer.status_code, body["kind"], body["detail"]) == (422, "validation", MISSING_TO)
    assert body["issues"] == [{"message": "Field required", "path": ["to"]}]


async def test_a_dead_jobs_last_error_names_the_field(db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        # stored by a producer whose schema was looser than the worker's
        await Jobs(conn, {"emails": dict[str, Any]}).enqueue(
            "emails", {"subject": "hi"}, max_attempts=1
        )
    jobs = Jobs(db_url, {"emails": Email})
    try:
        handled: list[Email] = []

        async def send(payload: Email, job: Any) -> None:
            handled.append(payload)

        report = await jobs.drain("emails", send)
        assert (report.succeeded, report.failed, handled) == (0, 1, [])
    finally:
        await jobs.close()
    status, out, err = await asyncio.to_thread(
        run_cli_in_thread, "jobs", "dead", "emails", "--database-url", db_url
    )
    assert status == 0, err
    assert MISSING_TO in out, out


def run_cli_in_thread(*argv: str) -> tuple[int, str, str]:
    """The CLI runs its own event loop: call it from a thread, capturing what it prints."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()
