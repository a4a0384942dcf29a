"""Lease ids of the agent inbox: ``lse_<base64url>`` of the event id, the delivery and the
16-byte token the database minted in the hand-out transaction, and an HMAC-SHA256 of them
(16 bytes) under ``lease_secret``.

The format is :func:`drainpipe.engine.core.mint_lease_id`'s, byte for byte: lease ids
handed out before an upgrade still settle after it (``tests/agents/test_lease_codec.py``
checks both ways). What differs is the cost, since every hand-out mints one per event and
every settlement reads one: the HMAC's keyed state (the secret and the prefix, hashed
once) is copied instead of being set up again per id, and base64 goes through
``binascii`` without ``base64``'s wrappers, about 1.5 us instead of 4 per mint-and-read.
The database never sees a lease id, only its token; without the secret nobody (the
database's readers included) can make a lease id from a token.

A codec also remembers the last lease ids it minted (a bounded map, in memory only): an ack
quoting one of them is authentic by construction, so its MAC is not computed again. That is
the common case of an agent acking what it pulled from the same process, or a server
answering the ack of what it handed out; any other lease id is decoded and its MAC checked.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import struct
from typing import Final

PREFIX: Final = "lse"
_HEAD: Final = PREFIX + "_"
_LAYOUT: Final = struct.Struct(">qi16s")  # bigint event id, integer delivery, uuid token
_MAC_BYTES: Final = 16
_RAW_BYTES: Final = _LAYOUT.size + _MAC_BYTES  # 44 bytes: 59 base64 characters, unpadded
_TEXT_CHARS: Final = len(_HEAD) + 59
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_BLOCK: Final = 64  # SHA-256's block size
_INNER_PAD: Final = bytes(byte ^ 0x36 for byte in range(256))
_OUTER_PAD: Final = bytes(byte ^ 0x5C for byte in range(256))

Lease = tuple[int, int, bytes]

#: A codec remembers the last 2048 to 4096 lease ids it minted: the last few pulls of every
#: concurrent consumer, about a megabyte.
REMEMBERED: Final = 2048


def _text(raw: bytes) -> str:
    """The lease id of its 44 bytes."""
    text = binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=")
    return _HEAD + text.decode("ascii")


class LeaseCodec:
    """Mints and reads the lease ids of one secret."""

    __slots__ = ("_earlier", "_inner", "_minted", "_outer")

    def __init__(self, secret: bytes) -> None:
        # HMAC-SHA256 (RFC 2104) from its two keyed hash states, copied per id: hmac's own
        # copy() and digest() are Python around the same two hashes (1.9 us an id against
        # 1.1). The MAC input is prefix, NUL, body (engine.core's layout): the key and the
        # first two are absorbed here once.
        key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_INNER_PAD))
        self._inner.update(PREFIX.encode() + b"\0")
        self._outer = hashlib.sha256(key.translate(_OUTER_PAD))
        # two generations: when this one is full it becomes the earlier one and the one
        # before is dropped (deleting a dict's oldest keys one by one makes every iter()
        # walk the holes they leave)
        self._minted: dict[str, Lease] = {}
        self._earlier: dict[str, Lease] = {}

    def _mac(self, body: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:_MAC_BYTES]

    def mint(self, event_id: int, delivery: int, token: bytes) -> str:
        body = _LAYOUT.pack(event_id, delivery, token)
        lease_id = _text(body + self._mac(body))
        minted = self._minted
        minted[lease_id] = (event_id, delivery, token)
        if len(minted) >= REMEMBERED:
            self._earlier, self._minted = minted, {}
        return lease_id

    def read(self, lease_id: object) -> Lease | None:
        """``(event id, delivery, token)`` of a lease id this secret minted, else None
        (malformed, altered, another prefix's or another secret's)."""
        if isinstance(lease_id, str):
            known = self._minted.get(lease_id) or self._earlier.get(lease_id)
            if known is not None:
                return known
        if (
            not isinstance(lease_id, str)
            or len(lease_id) != _TEXT_CHARS
            or not lease_id.startswith(_HEAD)
            or not lease_id.isascii()
        ):
            return None
        try:
            raw = binascii.a2b_base64(
                lease_id[len(_HEAD) :].encode("ascii").translate(_FROM_URLSAFE) + b"=",
                strict_mode=True,
            )
        except binascii.Error:
            return None
        if len(raw) != _RAW_BYTES or _text(raw) != lease_id:
            # one text per lease id: the last character's 2 unused low bits must be zero,
            # or an id with another last character would read as the same lease
            return None
        body = raw[: _LAYOUT.size]
        if not hmac.compare_digest(raw[_LAYOUT.size :], self._mac(body)):
            return None
        event_id, delivery, token = _LAYOUT.unpack(body)
        return event_id, delivery, token
