"""The WebSocket stream of an inbox: ``GET /v1/agent/inbox/{id}/stream?credit=1..10``.

Events are pushed only against the client's credit (``?credit=``, then ``{"type":
"credit", "n": k}`` frames), each handed out (and its lease started) right before it is
sent, so nothing waits in a buffer while its lease runs. Acks, releases and extends come
back as frames (``{"type": "ack", "id", "lease_id", ...}``, answered by ``{"type":
"result", "op", "id", "ok", "code"}``, in the order the frames came) or through the HTTP
API. Ack frames are queued as they are read, so the acks of a burst go to the database as
one batch; a release or extend waits for the socket's acks before it. At most
:data:`MAX_STREAMS` streams per inbox are open across processes: each holds a slot row
leased for :data:`SLOT_SECONDS` and renewed while the socket is open, so a crashed
process's slots free themselves. When the socket closes, its events' leases run out as
usual. WebSocket pings are the server's (uvicorn's ``ws_ping_interval``); a client may
also send ``{"type": "ping"}`` and gets ``{"type": "pong"}``.

Vercel functions do not hold WebSockets: the stream runs where a process lives on
(``drainpipe serve``, uvicorn, ``examples/container``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ..db.statement_shapes import Params, Row
from ..errors import DrainpipeError
from ..http_guards import cross_site_refusal
from ..http_websocket import WebSocket, WebSocketDisconnect
from .app import check_inbox, principal_of, scope_of
from .statements import ACK_MODES, MAX_EVENTS, ORDERS, choice, optional_name, whole_number

if TYPE_CHECKING:
    from .inboxes import AgentInbox, AgentInboxes

log = logging.getLogger("drainpipe.agents")

MAX_STREAMS: Final = 10
SLOT_SECONDS: Final = 30.0
#: How long one hand-out attempt of the stream long-polls before it renews its slot.
POLL_SECONDS: Final = 5.0
TOO_MANY_STREAMS: Final = "TOO_MANY_STREAMS"
INVALID_FRAME: Final = "INVALID_FRAME"
# close codes (4000-4999 are the application's): 4000 + the HTTP status it stands for
_CLOSE_FOR_STATUS = {400: 4400, 401: 4401, 403: 4403, 404: 4404, 409: 4409}


# -- the stream slots' statements ---------------------------------------------------------

STREAM_ACQUIRE = "SELECT drainpipe.agent_stream_acquire_v1(%s, %s, %s, %s, %s)"


def stream_acquire_params(
    inbox_id: str, holder: str, seconds: float, limit: int, now: datetime | None
) -> Params:
    return (inbox_id, holder, seconds, limit, now)


STREAM_RENEW = "SELECT drainpipe.agent_stream_renew_v1(%s, %s, %s, %s, %s)"


def stream_renew_params(
    inbox_id: str, slot: int, holder: str, seconds: float, now: datetime | None
) -> Params:
    return (inbox_id, slot, holder, seconds, now)


STREAM_RELEASE = "SELECT drainpipe.agent_stream_release_v1(%s, %s, %s)"


def stream_release_params(inbox_id: str, slot: int, holder: str) -> Params:
    return (inbox_id, slot, holder)


def parse_slot(rows: list[Row]) -> int | None:
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def parse_flag(rows: list[Row]) -> bool:
    return bool(rows[0][0]) if rows else False


# -- the stream ---------------------------------------------------------------------------


class _Stream:
    def __init__(
        self,
        agents: AgentInboxes,
        inbox: AgentInbox,
        websocket: WebSocket,
        scope: list[str] | None,
        options: dict[str, Any],
        credit: int,
        lease_seconds: float,
    ) -> None:
        self.agents = agents
        self.inbox = inbox
        self.websocket = websocket
        self.scope = scope
        self.options = options
        self.credit = credit
        self.lease_seconds = lease_seconds
        # events handed out over this socket and not settled over it, with the loop time
        # their lease ends: credit never goes past what leaves MAX_EVENTS of them unsettled
        self.unsettled: dict[str, float] = {}
        self.credit_given = asyncio.Event()
        self.send_lock = asyncio.Lock()
        # the socket's acks not answered yet, in the order their frames came
        self.acks: asyncio.Queue[tuple[Any, asyncio.Future[bool]]] = asyncio.Queue()

    async def send(self, frame: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.websocket.send_text(json.dumps(frame, separators=(",", ":")))

    def room(self) -> int:
        """How many more events this socket may hold unsettled (leases that ran out free
        their place: the event is anybody's again)."""
        now = asyncio.get_running_loop().time()
        for event_id in [key for key, until in self.unsettled.items() if until <= now]:
            del self.unsettled[event_id]
        return MAX_EVENTS - len(self.unsettled)

    def add_credit(self, n: int) -> None:
        """Credit past the ceiling is not kept: credit plus unsettled events stay <= 10."""
        self.credit = max(0, min(self.credit + n, self.room()))

    def settled(self, event_id: Any, ok: bool, code: str | None, seconds: Any = None) -> None:
        """A settlement frame's result: the event leaves the socket's unsettled ones when
        it was settled here or its lease is no longer ours; an extend moves its end."""
        if not isinstance(event_id, str) or event_id not in self.unsettled:
            return
        if ok and seconds is not None:
            until = asyncio.get_running_loop().time() + float(seconds)
            self.unsettled[event_id] = until
        elif ok or code in ("LEASE_LOST", "EVENT_NOT_FOUND"):
            del self.unsettled[event_id]

    async def push(self, renew: Any) -> None:
        """Hand out and send events while there is credit; renew the slot between polls."""
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            if loop.time() - renewed >= SLOT_SECONDS / 3:
                if not await renew():
                    return  # the slot was lost (this process stalled past its lease)
                renewed = loop.time()
            if self.credit <= 0:
                self.credit_given.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.credit_given.wait(), SLOT_SECONDS / 3)
                continue
            self.credit = min(self.credit, self.room())
            if self.credit <= 0:
                continue
            events = await self.inbox.pull(
                max=min(self.credit, MAX_EVENTS),
                wait=POLL_SECONDS,
                principal=None,
                key=None,
                budget=None,
                **self.options,
            )
            for event in events:
                self.credit -= 1
                if event.lease_id is not None:  # pickup events are settled at hand-out
                    until = loop.time() + self.lease_seconds
                    self.unsettled[event.id] = until
                await self.send({"type": "event", "event": event.to_json()})

    async def read(self) -> None:
        """Client frames: credit, ack/release/extend, ping. A bad frame is answered with an
        error frame; the stream stays open."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
            text = message.get("text")
            if not isinstance(text, str):  # a binary frame: the protocol is JSON text
                await self.send(
                    {"type": "error", "code": INVALID_FRAME, "detail": "frames are JSON text"}
                )
                continue
            try:
                frame = json.loads(text)
            except (ValueError, RecursionError):  # also JSON nested past the recursion limit
                await self.send({"type": "error", "code": INVALID_FRAME, "detail": "not JSON"})
                continue
            kind = frame.get("type") if isinstance(frame, dict) else None
            if kind == "credit":
                try:
                    self.add_credit(whole_number(frame.get("n"), "n", 1, MAX_EVENTS))
                except DrainpipeError as error:
                    await self.send({"type": "error", "code": error.code, "detail": str(error)})
                    continue
                self.credit_given.set()
            elif kind == "ack":
                self.queue_ack(frame)
            elif kind in ("release", "extend"):
                await self.acks.join()  # after this socket's acks, as the frames came
                await self.settle(kind, frame)
            elif kind == "ping":
                await self.send({"type": "pong"})
            else:
                await self.send(
                    {"type": "error", "code": INVALID_FRAME, "detail": "unknown frame type"}
                )

    def queue_ack(self, frame: dict[str, Any]) -> None:
        """Queues the ack now, without waiting for it: the ack frames of a burst go to the
        database as one batch (and with the next pull, when a credit frame came with them).
        :meth:`answer` sends their results in the order the frames came."""
        loop = asyncio.get_running_loop()
        event_id = frame.get("id")
        queued: asyncio.Future[bool]
        try:
            queued = self.agents._queue_ack_ok(
                loop, event_id, frame.get("lease_id"), frame.get("outcome"), self.scope
            )
        except DrainpipeError as error:  # malformed: answered in its turn, as the others
            queued = loop.create_future()
            queued.set_exception(error)
        self.acks.put_nowait((event_id, queued))

    async def answer(self) -> None:
        """Sends the result of each ack frame, in the order the frames came. A database
        failure (5xx) ends the stream, as it did when the reader awaited each ack."""
        while True:
            event_id, queued = await self.acks.get()
            try:
                ok, code = await _frame_result(queued)
                self.settled(event_id, ok, code)
                await self.send(
                    {"type": "result", "op": "ack", "id": event_id, "ok": ok, "code": code}
                )
            finally:
                self.acks.task_done()

    async def settle(self, op: str, frame: dict[str, Any]) -> None:
        """A release or extend frame, answered when it is settled."""
        fields: dict[str, Any] = {}
        if op == "release":
            fields["delay_seconds"] = frame.get("delay_seconds", 0)
            fields["error"] = frame.get("error")
        else:
            fields["seconds"] = frame.get("seconds")
        event_id = frame.get("id")

        async def settled() -> bool:
            result = await self.agents.settle(
                op,  # type: ignore[arg-type]
                event_id,
                frame.get("lease_id"),
                inboxes=self.scope,
                **fields,
            )
            return result.ok

        ok, code = await _frame_result(settled())
        self.settled(event_id, ok, code, fields.get("seconds") if op == "extend" else None)
        await self.send({"type": "result", "op": op, "id": event_id, "ok": ok, "code": code})


async def _frame_result(settled: Awaitable[bool]) -> tuple[bool, str | None]:
    """``(ok, code)`` of a settlement frame's result (``LEASE_LOST`` when not ok, the
    error's code for a client's mistake); a 5xx error raises and ends the stream."""
    try:
        ok = await settled
    except DrainpipeError as error:
        if error.status >= 500:
            raise
        return False, error.code or error.kind
    return ok, None if ok else "LEASE_LOST"


async def _refuse(websocket: WebSocket, error: DrainpipeError) -> None:
    await websocket.accept()
    await websocket.send_text(
        json.dumps({"type": "error", "code": error.code or error.kind, "detail": str(error)})
    )
    await websocket.close(code=_CLOSE_FOR_STATUS.get(error.status, 1011))


async def stream_endpoint(
    agents: AgentInboxes,
    authorize: Any,
    websocket: WebSocket,
    allowed_origins: frozenset[str] | None = None,
) -> None:
    inbox_id = websocket.path_params["inbox_id"]
    holder = f"stream-{os.urandom(8).hex()}"
    query = websocket.query_params
    try:
        # a browser opens a WebSocket to any site with that site's cookies: Origin decides
        refusal = cross_site_refusal("GET", websocket.headers, allowed_origins, websocket=True)
        if refusal is not None:
            raise refusal
        principal = await principal_of(authorize, websocket)
        check_inbox(principal, inbox_id)
        settings = await agents.settings(inbox_id)
        credit = whole_number(query.get("credit", "1"), "credit", 1, MAX_EVENTS)
        options: dict[str, Any] = {
            "order": None if "order" not in query else choice(query["order"], "order", ORDERS),
            "ack": None if "ack" not in query else choice(query["ack"], "ack", ACK_MODES),
            "filters": tuple(
                optional_name(query.get(name), name)
                for name in ("type", "source", "subscription", "correlation")
            ),
        }
        mode = options["ack"] or settings.default_ack
        if mode not in settings.allowed_ack:
            raise DrainpipeError(
                "invalid_request", f"ack={mode} is not allowed", code="ACK_MODE_NOT_ALLOWED"
            )
        slot = parse_slot(
            await agents.fetch(
                STREAM_ACQUIRE,
                stream_acquire_params(
                    inbox_id, holder, SLOT_SECONDS, MAX_STREAMS, agents._instant()
                ),
            )
        )
        if slot is None:
            raise DrainpipeError(
                "rate_limited",
                f"This inbox has {MAX_STREAMS} open streams already",
                code=TOO_MANY_STREAMS,
                status=409,
            )
    except DrainpipeError as error:
        await _refuse(websocket, error)
        return

    async def renew() -> bool:
        params = stream_renew_params(inbox_id, slot, holder, SLOT_SECONDS, agents._instant())
        return parse_flag(await agents.fetch(STREAM_RENEW, params))

    await websocket.accept()
    stream = _Stream(
        agents,
        agents.inbox(inbox_id),
        websocket,
        scope_of(principal),
        options,
        credit,
        float(settings.lease_seconds),
    )
    tasks = [
        asyncio.create_task(stream.push(renew), name="drainpipe-stream-push"),
        asyncio.create_task(stream.read(), name="drainpipe-stream-read"),
        asyncio.create_task(stream.answer(), name="drainpipe-stream-answer"),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            failure = task.exception()
            if failure is None or isinstance(failure, WebSocketDisconnect):
                continue
            if type(failure).__name__ not in (  # the servers' own words for a gone client
                "ClientDisconnected",
                "ConnectionClosed",
                "ConnectionClosedOK",
                "ConnectionClosedError",
            ):
                log.warning("agent inbox stream of %s stopped: %r", inbox_id, failure)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await agents.fetch(STREAM_RELEASE, stream_release_params(inbox_id, slot, holder))
        with contextlib.suppress(Exception):
            await websocket.close()
