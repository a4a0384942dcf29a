"""Queue policies and encrypted payloads over PostgREST (the ``rest-api`` module's policy
functions, docs/policies.md): store a policy, apply retention, rewrite sealed payloads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import postgrest_rows as rows

__all__ = ["PostgrestPolicies"]

# ensure_policy_v3's argument names, in QueuePolicy.as_row's order
_POLICY_COLUMNS = (
    "queue",
    "max_payload_bytes",
    "max_pending",
    "lease",
    "max_lease",
    "max_delay",
    "max_attempts",
    "attempt_window",
    "retention",
    "encrypt",
    "replay_window",
    "replayable",
    "concurrency",
    "key_concurrency",
    "rate_count",
    "rate_per",
    "key_rate_count",
    "key_rate_per",
    "ordered",
)


class PostgrestPolicies:
    """The policy operations of :class:`~drainpipe.backends.postgrest.PostgrestBackend`."""

    schema: str
    if TYPE_CHECKING:

        def rpc(self, fn: str, params: Mapping[str, Any]) -> Any: ...

    async def ensure_policy(self, queue: str, row: Sequence[Any]) -> None:
        """Store ``QueuePolicy.as_row(queue)`` where the ``drainpipe.*`` checks read it, so
        every call through the API (and every direct writer) obeys it."""
        params = dict(zip(_POLICY_COLUMNS, row, strict=True))
        rows.flag(self.schema, "ensure_policy_v3", await self.rpc("ensure_policy_v3", params))

    async def apply_retention(self, *, min_interval: float | None) -> int | None:
        data = await self.rpc(
            "apply_retention_v1",
            {"min_interval": None if min_interval is None else float(min_interval)},
        )
        return None if data is None else rows.count(self.schema, "apply_retention_v1", data)

    async def live_payloads(self, queue: str, *, after: int, limit: int) -> list[tuple[int, Any]]:
        data = await self.rpc(
            "live_payloads_v1", {"queue": queue, "after_id": after, "row_limit": limit}
        )
        return rows.live_payloads(self.schema, data)

    async def rewrite_payload(self, queue: str, job_id: int, old: Any, new: Any) -> bool:
        data = await self.rpc(
            "rewrite_payload_v1",
            {"queue": queue, "id": job_id, "old_payload": old, "new_payload": new},
        )
        return rows.flag(self.schema, "rewrite_payload_v1", data)
