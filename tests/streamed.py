"""A client that streams a large chunked body to a real server and stops as soon as the server
answers, and the resident memory of this process: what the capped-body tests measure."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

CHUNK = b"x" * 65536


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@dataclass
class Streamed:
    status: int | None
    body: bytes
    sent: int  # body bytes written before the answer came (or the server hung up)
    seconds: float


async def post_streamed(
    port: int, path: str, headers: dict[str, str], total: int, *, chunked: bool = True
) -> Streamed:
    """POST ``total`` bytes of body in 64 KiB chunks (``Transfer-Encoding: chunked``, or a
    ``Content-Length`` when ``chunked`` is False), reading the answer as soon as it comes."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    received = bytearray()

    async def read_all() -> None:
        # piece by piece: a reset after the answer must not lose what was read
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                received.extend(chunk)

    answer = asyncio.create_task(read_all())
    sent = 0
    try:
        while sent < total and not answer.done() and not received:
            piece = CHUNK[: min(len(CHUNK), total - sent)]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            sent += len(piece)
            await asyncio.sleep(0.001)  # let an early answer be read before sending on
        if chunked and not answer.done() and not received:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server answered and closed while we were still sending
    try:
        await asyncio.wait_for(answer, timeout=30)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return Streamed(status, body, sent, time.monotonic() - started)
