"""Idempotency keys: a retried request runs its handler once; later ones get its response.

:mod:`.service` is :class:`Idempotency` (``handle``, ``wrap``, ``begin``/``complete``/
``release``), :mod:`.keys` reads and checks keys, scopes and fingerprints, :mod:`.idempotency_rules`
the checks and decisions it shares with the sync twin (:mod:`drainpipe.sync`), and
:mod:`.responses` turns a handler's response into what is stored and replayed.
:class:`Idempotency` loads on first use (the sync twin imports no asyncio)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..models import Begin
from .keys import (
    DEFAULT_MAX_BODY_BYTES,
    KEY_IN_USE,
    KEY_INVALID,
    KEY_MISSING,
    KEY_REUSED,
    MAX_KEY_LENGTH,
    REPLAYED_HEADER,
    RESPONSE_TOO_LARGE,
    SCOPE_INVALID,
    SCOPE_KEY_ENV,
    SCOPE_REQUIRED,
    caller_scope,
    check_key,
    fingerprint,
    parse_key,
)

if TYPE_CHECKING:
    from .service import Idempotency

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "KEY_INVALID",
    "KEY_IN_USE",
    "KEY_MISSING",
    "KEY_REUSED",
    "MAX_KEY_LENGTH",
    "REPLAYED_HEADER",
    "RESPONSE_TOO_LARGE",
    "SCOPE_INVALID",
    "SCOPE_KEY_ENV",
    "SCOPE_REQUIRED",
    "Begin",
    "Idempotency",
    "caller_scope",
    "check_key",
    "fingerprint",
    "parse_key",
]


def __getattr__(name: str) -> Any:
    if name != "Idempotency":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module(".service", __name__).Idempotency
    globals()[name] = value
    return value
