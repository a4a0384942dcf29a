"""Idempotency keys: a retried request runs its handler once; later ones get its response.

:mod:`.service` is :class:`Idempotency` (``handle``, ``wrap``, ``begin``/``complete``/
``release``), :mod:`.keys` reads and checks keys, scopes and fingerprints, and
:mod:`.responses` turns a handler's response into what is stored and replayed."""

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
    caller_scope,
    check_key,
    fingerprint,
    parse_key,
)
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
    "Begin",
    "Idempotency",
    "caller_scope",
    "check_key",
    "fingerprint",
    "parse_key",
]
