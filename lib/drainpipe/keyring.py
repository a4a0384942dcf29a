"""Payload keys: AES-256-GCM with key ids, rotation by key list, keyed dedupe hashes.

``DRAINPIPE_PAYLOAD_KEYS="k2:<32 bytes, urlsafe base64>,k1:<...>"``: the first entry
encrypts, every entry decrypts (rotation: put the new key first, run
``jobs.reencrypt(queue)``, drop the old key once it returned 0). A ciphertext is bound to
its queue and its key id as associated data, so it does not decrypt in another queue.

Stored form of a sealed value: ``"<kid>:<urlsafe base64 of nonce (12 bytes) || ciphertext
|| tag>"``. Nonces are random (96 bits): at the 2**32 messages per key NIST allows for
random nonces, rotate.

Dedupe keys are stored as ``"h1:" + HMAC-SHA256(dedupe key, queue NUL key)`` (urlsafe
base64, 43 characters). The HMAC key is derived (HKDF-SHA256) from the **last** entry of
the list, the oldest key, which rotation keeps longest: prepending a new key changes
nothing for dedupe. Dropping the last entry changes the hashes, so a job live at that
moment no longer coalesces with a new enqueue of the same key (docs/policies.md).

Keys are never logged: ``repr`` shows key ids only, and errors name entries by position.
``cryptography`` is imported on first use, so ``import drainpipe`` stays cheap.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any, Final

DEFAULT_ENV_NAME: Final = "DRAINPIPE_PAYLOAD_KEYS"
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
DEDUPE_PREFIX: Final = "h1:"
_KID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_AAD_PREFIX: Final = b"drainpipe.payload.v1\x00"


class UnreadableCiphertext(Exception):
    """A sealed value that does not open: unknown key id, tampered or not ours. The message
    never holds key material or plaintext."""


def _decode_key(text: str, position: int) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    try:
        key = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"payload key entry {position}: the key is not urlsafe base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"payload key entry {position}: the key must be {KEY_BYTES} bytes, not {len(key)}"
        )
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Keyring:
    """Key ids and AES-256-GCM keys; the first encrypts, all decrypt."""

    __slots__ = ("_aead", "_dedupe_key", "_keys", "primary")

    def __init__(self, keys: Mapping[str, bytes] | list[tuple[str, bytes]]) -> None:
        entries = list(keys.items()) if isinstance(keys, Mapping) else list(keys)
        if not entries:
            raise ValueError("a Keyring needs at least one key")
        seen: dict[str, bytes] = {}
        for position, (kid, key) in enumerate(entries, start=1):
            if not isinstance(kid, str) or not _KID.match(kid):
                raise ValueError(
                    f"payload key entry {position}: the key id must be 1-32 characters of"
                    " A-Z a-z 0-9 _ -"
                )
            if kid in seen:
                raise ValueError(f'payload key entry {position}: key id "{kid}" is listed twice')
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ValueError(f"payload key entry {position}: the key must be {KEY_BYTES} bytes")
            seen[kid] = key
        self._keys = seen
        self.primary: str = entries[0][0]
        # a key of its own for dedupe hashes, never the encryption key itself
        self._dedupe_key = hmac.new(
            hashlib.sha256(b"drainpipe.dedupe.v1").digest(), entries[-1][1], hashlib.sha256
        ).digest()
        self._aead: dict[str, Any] = {}

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """``kid:key`` entries, comma separated (spaces around entries are ignored)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the payload key list is empty")
        entries: list[tuple[str, bytes]] = []
        for position, raw in enumerate(text.split(","), start=1):
            entry = raw.strip()
            kid, sep, key = entry.partition(":")
            if not sep or not kid or not key:
                raise ValueError(f'payload key entry {position} is not "kid:key"')
            entries.append((kid.strip(), _decode_key(key.strip(), position)))
        return cls(entries)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, name: str = DEFAULT_ENV_NAME
    ) -> Keyring:
        """The keyring in ``env[name]`` (default ``os.environ["DRAINPIPE_PAYLOAD_KEYS"]``);
        ``ValueError`` when it is missing, empty or malformed."""
        source = os.environ if env is None else env
        value = source.get(name)
        if value is None or not value.strip():
            raise ValueError(f"{name} is not set: generate an entry with `drainpipe keys new`")
        return cls.parse(value)

    @staticmethod
    def new_entry(kid: str | None = None) -> str:
        """A fresh ``kid:key`` entry (the key from the OS's CSPRNG)."""
        kid = kid or "k" + secrets.token_hex(4)
        if not _KID.match(kid):
            raise ValueError("the key id must be 1-32 characters of A-Z a-z 0-9 _ -")
        return f"{kid}:{_b64(secrets.token_bytes(KEY_BYTES))}"

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids!r})"

    # -- sealing -----------------------------------------------------------------------------

    def _cipher(self, kid: str) -> Any:
        aead = self._aead.get(kid)
        if aead is None:
            try:
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            except ImportError:  # pragma: no cover - the extra is part of .[dev]
                raise RuntimeError(
                    "encrypted payloads need the cryptography package: pip install"
                    " 'drainpipe[encryption]'"
                ) from None

            aead = self._aead[kid] = AESGCM(self._keys[kid])
        return aead

    @staticmethod
    def _aad(queue: str, kid: str) -> bytes:
        return _AAD_PREFIX + queue.encode() + b"\x00" + kid.encode()

    def seal(self, queue: str, plaintext: bytes) -> str:
        """Encrypt under the first key, bound to ``queue``: the stored text form."""
        kid = self.primary
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._cipher(kid).encrypt(nonce, plaintext, self._aad(queue, kid))
        return f"{kid}:{_b64(nonce + sealed)}"

    def open(self, queue: str, sealed: Any) -> bytes:
        """The plaintext of :meth:`seal`'s output for ``queue``; :class:`UnreadableCiphertext`
        when the key id is unknown or the value was changed or sealed for another queue."""
        if not isinstance(sealed, str):
            raise UnreadableCiphertext("the sealed payload is not a string")
        kid, sep, body = sealed.partition(":")
        if not sep or kid not in self._keys:
            raise UnreadableCiphertext(f'no key with id "{kid[:32]}" in the keyring')
        try:
            raw = _unb64(body)
        except (binascii.Error, ValueError):
            raise UnreadableCiphertext("the sealed payload is not base64") from None
        if len(raw) < NONCE_BYTES + 16:
            raise UnreadableCiphertext("the sealed payload is too short")
        from cryptography.exceptions import InvalidTag

        try:
            plaintext: bytes = self._cipher(kid).decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], self._aad(queue, kid)
            )
        except InvalidTag:
            raise UnreadableCiphertext(
                f'the payload does not decrypt with key "{kid}" for this queue'
                " (changed, or sealed for another queue)"
            ) from None
        return plaintext

    def sealed_with_primary(self, sealed: Any) -> bool:
        return isinstance(sealed, str) and sealed.startswith(self.primary + ":")

    def dedupe_hash(self, queue: str, key: str) -> str:
        """The keyed hash stored in place of a dedupe key (same for every key order that
        keeps the last entry)."""
        message = queue.encode() + b"\x00" + key.encode("utf-8", "surrogatepass")
        digest = hmac.new(self._dedupe_key, message, hashlib.sha256).digest()
        return DEDUPE_PREFIX + _b64(digest)
