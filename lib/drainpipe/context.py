"""The context envelope: who enqueued a job and for which tenant, stored with the payload.

Stored as ``{"$dp": 1, "context": {...}, "payload": <payload>}`` only when there is an
actor or a tenant; otherwise the bare payload is stored. Reading is forgiving: anything
malformed in the context is dropped, never an error. Writing is strict: unknown keys, and a
tenant or actor id past 255 characters or holding NUL or a lone surrogate, are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import validation_error
from .models import Actor, JobContext
from .validation import check_text, storable_text

ENVELOPE_KEY = "$dp"
_ACTOR_KINDS = ("user", "service", "anon")
_CONTEXT_KEYS = frozenset({"actor", "tenant"})
_ACTOR_KEYS = frozenset({"id", "kind"})


def coerce_context(context: JobContext | Mapping[str, Any] | None) -> JobContext | None:
    """Accept a :class:`JobContext` or a mapping ``{"actor": {"id", "kind"}, "tenant"}``."""
    if context is None:
        return None
    if isinstance(context, JobContext):
        if context.tenant is not None:
            check_text(context.tenant, "context.tenant", path=["context", "tenant"])
        if context.actor is not None:
            check_text(context.actor.id, "context.actor.id", path=["context", "actor", "id"])
        return context
    if not isinstance(context, Mapping):
        raise validation_error(
            "context must be a JobContext or a mapping with actor and tenant",
            [{"message": "Expected a JobContext or a mapping", "path": ["context"]}],
        )
    # a typo ("tenat") silently ignored would store a job for no tenant at all
    unknown = sorted(map(str, set(context) - _CONTEXT_KEYS))
    if unknown:
        raise validation_error(
            f"context has unknown keys {', '.join(unknown)}: only actor and tenant",
            [{"message": "Unknown key", "path": ["context", key]} for key in unknown],
        )
    actor_value = context.get("actor")
    actor: Actor | None = None
    if isinstance(actor_value, Actor):
        actor = actor_value
    elif isinstance(actor_value, Mapping):
        unknown = sorted(map(str, set(actor_value) - _ACTOR_KEYS))
        if unknown:
            raise validation_error(
                f"context.actor has unknown keys {', '.join(unknown)}: only id and kind",
                [{"message": "Unknown key", "path": ["context", "actor", k]} for k in unknown],
            )
        actor_id, kind = actor_value.get("id"), actor_value.get("kind", "user")
        if not isinstance(actor_id, str) or not actor_id or kind not in _ACTOR_KINDS:
            raise validation_error(
                "context.actor needs a string id and a kind of user, service or anon",
                [{"message": "Invalid actor", "path": ["context", "actor"]}],
            )
        check_text(actor_id, "context.actor.id", path=["context", "actor", "id"])
        actor = Actor(actor_id, kind)
    elif actor_value is not None:
        raise validation_error(
            "context.actor must be a mapping with id and kind",
            [{"message": "Invalid actor", "path": ["context", "actor"]}],
        )
    tenant = context.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise validation_error(
            "context.tenant must be a non-empty string",
            [{"message": "Invalid tenant", "path": ["context", "tenant"]}],
        )
    if tenant is not None:
        check_text(tenant, "context.tenant", path=["context", "tenant"])
    return JobContext(actor=actor, tenant=tenant)


def wrap_payload(payload: Any, context: JobContext | None) -> Any:
    """The JSON value to store: the payload, or the envelope when there is an actor or tenant.

    A payload that itself carries the envelope key is always wrapped: stored bare, it would
    be read back as an envelope, and a caller-controlled payload could forge a tenant.
    """
    if (context is None or (context.actor is None and context.tenant is None)) and not (
        isinstance(payload, dict) and ENVELOPE_KEY in payload
    ):
        return payload
    if context is None:
        context = JobContext()
    recorded: dict[str, Any] = {}
    if context.actor is not None:
        recorded["actor"] = {"id": context.actor.id, "kind": context.actor.kind}
    if context.tenant is not None:
        recorded["tenant"] = context.tenant
    return {ENVELOPE_KEY: 1, "context": recorded, "payload": payload}


MAX_KEY_BYTES = 200
PRIORITY_RANGE = range(-100, 101)


def check_flow(key: Any, priority: Any) -> tuple[str | None, int]:
    """A job's flow ``key`` (text of at most 200 bytes) and ``priority`` (an int in
    -100..100); ``ValueError`` otherwise."""
    if key is not None and (
        not isinstance(key, str)
        or not key
        or storable_text(key) != key
        or len(key.encode()) > MAX_KEY_BYTES
    ):
        raise ValueError(
            f"key must be a non-empty text of at most {MAX_KEY_BYTES} bytes"
            " (no NUL characters or lone surrogates)"
        )
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or priority not in PRIORITY_RANGE
    ):
        raise ValueError("priority must be an integer from -100 to 100")
    return key, priority


def add_flow(stored: Any, key: str | None, priority: int) -> Any:
    """``stored`` with the job's flow key and priority as envelope metadata (``key``,
    ``priority``), kept in clear beside a sealed payload as the tenant is; unchanged when
    there is neither. The database reads them (``drainpipe.job_key``/``job_priority``)."""
    if key is None and priority == 0:
        return stored
    if not (isinstance(stored, dict) and stored.get(ENVELOPE_KEY) == 1):
        stored = {ENVELOPE_KEY: 1, "context": {}, "payload": stored}
    else:
        stored = dict(stored)
    if key is not None:
        stored["key"] = key
    if priority:
        stored["priority"] = priority
    return stored


def add_trace(stored: Any, trace: Mapping[str, str]) -> Any:
    """``stored`` (what :func:`wrap_payload` returned) with the trace context of the
    enqueuing span in the envelope's ``trace`` member, wrapping a bare payload."""
    if isinstance(stored, dict) and stored.get(ENVELOPE_KEY) == 1 and "payload" in stored:
        return {**stored, "trace": dict(trace)}
    return {ENVELOPE_KEY: 1, "context": {}, "trace": dict(trace), "payload": stored}


def _trace_of(stored: dict[str, Any]) -> dict[str, str] | None:
    trace = stored.get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("traceparent"), str):
        return {key: value for key, value in trace.items() if isinstance(value, str)}
    return None


def unwrap_payload(stored: Any, *, all_tenants: bool = False) -> tuple[Any, JobContext]:
    """Split a stored value into (payload, context)."""
    if isinstance(stored, dict) and stored.get(ENVELOPE_KEY) == 1 and "payload" in stored:
        recorded = stored.get("context")
        actor = tenant = None
        if isinstance(recorded, dict):
            raw_actor = recorded.get("actor")
            if (
                isinstance(raw_actor, dict)
                and isinstance(raw_actor.get("id"), str)
                and raw_actor.get("kind") in _ACTOR_KINDS
            ):
                actor = Actor(raw_actor["id"], raw_actor["kind"])
            raw_tenant = recorded.get("tenant")
            if isinstance(raw_tenant, str) and raw_tenant:
                tenant = raw_tenant
        return stored["payload"], JobContext(
            actor=actor,
            tenant=tenant,
            all_tenants=all_tenants and tenant is None,
            trace=_trace_of(stored),
        )
    return stored, JobContext(all_tenants=all_tenants)
