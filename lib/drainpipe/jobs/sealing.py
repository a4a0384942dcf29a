"""Encrypted payloads in the job's stored form, for every backend (it happens in the client).

Stored: ``{"$dp": 1, "sealed": "<kid>:<ciphertext>", "context": {"tenant": ...}}``; the
``context`` member only when there is a tenant, which stays in clear as metadata. The
ciphertext holds the whole context envelope (payload, actor and tenant) as JSON, so the
tenant is also authenticated: a sealed job whose clear tenant was changed does not open.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import orjson

from ..context import ENVELOPE_KEY, unwrap_payload
from ..db import dump_json
from ..errors import DrainpipeError
from ..keyring import Keyring, UnreadableCiphertext
from ..models import Job, JobContext, claimed_job
from .policy import PAYLOAD_UNREADABLE

SEALED_KEY: Final = "sealed"
log = logging.getLogger("drainpipe.jobs")


def seal(keyring: Keyring, queue: str, stored: Any, context: JobContext | None) -> Any:
    """``stored`` (what ``wrap_payload`` returned) as its sealed form for ``queue``."""
    plaintext = dump_json(stored)
    sealed: dict[str, Any] = {ENVELOPE_KEY: 1, SEALED_KEY: keyring.seal(queue, plaintext)}
    if context is not None and context.tenant is not None:
        sealed["context"] = {"tenant": context.tenant}
    return sealed


def is_sealed(value: Any) -> bool:
    return isinstance(value, dict) and value.get(ENVELOPE_KEY) == 1 and SEALED_KEY in value


def unreadable(job_id: int, queue: str, reason: str) -> DrainpipeError:
    """What a handler's ``on_error`` hears of a job that does not decrypt (never the bytes)."""
    return DrainpipeError(
        "invalid_input",
        f"queue {queue} job {job_id}: the payload is unreadable: {reason}",
        code=PAYLOAD_UNREADABLE,
    )


def open_stored(keyring: Keyring, queue: str, stored: dict[str, Any]) -> tuple[Any, JobContext]:
    """(payload, context) of a sealed stored value; :class:`UnreadableCiphertext` else."""
    plaintext = keyring.open(queue, stored.get(SEALED_KEY))
    try:
        inner = orjson.loads(plaintext)
    except orjson.JSONDecodeError:
        raise UnreadableCiphertext("the decrypted payload is not JSON") from None
    payload, context = unwrap_payload(inner)
    clear = stored.get("context")
    clear_tenant = clear.get("tenant") if isinstance(clear, dict) else None
    if clear_tenant != context.tenant:
        raise UnreadableCiphertext("the tenant stored in clear does not match the sealed one")
    return payload, context


def open_job(keyring: Keyring, job: Job[Any]) -> Job[Any]:
    """The claimed ``job`` with its payload and context decrypted (a job stored in clear is
    returned as is); :class:`UnreadableCiphertext` when it does not open."""
    stored = job.payload
    if not is_sealed(stored):
        return job
    payload, context = open_stored(keyring, job.queue, stored)
    if job.context.trace is not None or job.context.all_tenants:
        context = JobContext(
            actor=context.actor,
            tenant=context.tenant,
            all_tenants=job.context.all_tenants and context.tenant is None,
            trace=job.context.trace,
        )
    return claimed_job(
        job.id,
        job.queue,
        payload,
        context,
        job.attempts,
        job.max_attempts,
        job.enqueued_at,
        job.visible_until,
        job.last_error,
    )


def reseal(keyring: Keyring, queue: str, stored: Any) -> Any | None:
    """The stored value sealed under the first key, or None when it already is. A value in
    clear is sealed; one that does not open raises :class:`UnreadableCiphertext`."""
    from ..context import wrap_payload

    if not is_sealed(stored):
        payload, context = unwrap_payload(stored)
        if not is_sealed(payload):
            return seal(keyring, queue, wrap_payload(payload, context), context)
        stored = payload  # a trace envelope around a sealed value: the trace is dropped
    if keyring.sealed_with_primary(stored[SEALED_KEY]):
        return None
    payload, context = open_stored(keyring, queue, stored)
    return seal(keyring, queue, wrap_payload(payload, context), context)


# -- event data (durable steps' emit and wait_for) ------------------------------------------
# An emit does not know which queues' jobs wait for its event, so a Jobs with a keyring
# seals every event's data, bound to the event's name (not to a queue): a waiter on any
# queue opens it with the same keys. None stays None (it says nothing).


def _event_context(event: str) -> str:
    return "event:" + event


def seal_event(keyring: Keyring | None, event: str, data: Any) -> Any:
    """Event ``data`` as stored: sealed when there is a keyring, else as it is."""
    if keyring is None or data is None:
        return data
    sealed = keyring.seal(_event_context(event), dump_json(data, "data"))
    return {ENVELOPE_KEY: 1, SEALED_KEY: sealed}


def open_event(keyring: Keyring | None, event: str, stored: Any) -> Any:
    """The data of an event as emitted: opened when sealed. A sealed one without a keyring
    (or under keys that do not open it) is ``PAYLOAD_UNREADABLE``, as a job's would be."""
    if not is_sealed(stored):
        return stored  # emitted in clear (without a keyring, or by SQL emit_event_v1)
    if keyring is not None:
        try:
            return orjson.loads(keyring.open(_event_context(event), stored[SEALED_KEY]))
        except UnreadableCiphertext as exc:
            reason = str(exc)
    else:
        reason = "this Jobs has no keyring"
    raise DrainpipeError(
        "invalid_input",
        f'The data of event "{event}" is sealed and does not open: {reason}',
        code=PAYLOAD_UNREADABLE,
    )
