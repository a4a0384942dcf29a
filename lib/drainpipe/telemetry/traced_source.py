"""Spans and metrics around the calls of a claimed source (jobs or webhook messages)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from ..codes import Suspend
from ..errors import Retry
from ..validation import error_text
from .instruments import SYSTEM

if TYPE_CHECKING:
    from .instruments import Telemetry


class TracedSource:
    """A :class:`~drainpipe.engine.runner.ClaimableSource` with spans and metrics around the
    inner source's calls. Built only when :func:`active` found something to record to."""

    def __init__(self, inner: Any, otel: Telemetry) -> None:
        self.inner = inner
        self.otel = otel
        self.leases = inner.leases
        self.heartbeat_floor = inner.heartbeat_floor
        self.complete_each = inner.complete_each
        self.async_handler = True  # start() always returns a coroutine
        self.log = inner.log
        self.name: str = inner.name
        # optional source calls (skips, why a lease was lost) pass straight through
        for optional in ("skip", "why_lost", "keep_result"):
            if hasattr(inner, optional):
                setattr(self, optional, getattr(inner, optional))
        if hasattr(inner, "complete_and_claim"):
            self.complete_and_claim = self._complete_and_claim
        jobs = inner.concept == "jobs"
        self.concept: str = inner.concept
        self._prefix = "drainpipe" if jobs else "drainpipe.webhook"
        self._run_name = "drainpipe.job" if jobs else "drainpipe.webhook.process"
        self._labels = {"queue": self.name} if jobs else {"source": self.name}
        self._processed = otel.processed if jobs else otel.webhooks_processed
        self._failed = otel.failed if jobs else otel.webhooks_failed
        self._dead = otel.dead if jobs else None
        self._base = {"messaging.system": SYSTEM, "messaging.destination.name": self.name}
        # built once: a new attribute dict per job is measurable on this path
        self._by_outcome = {
            outcome: {**self._labels, "outcome": outcome}
            for outcome in ("succeeded", "failed", "retry", "cancelled", "suspended")
        }

    def fields(self, item: Any) -> dict[str, Any]:
        return self.inner.fields(item)  # type: ignore[no-any-return]

    def describe(self, item: Any) -> str:
        return self.inner.describe(item)  # type: ignore[no-any-return]

    def extend(self, items: Sequence[Any], lease: float) -> Awaitable[set[int]]:
        return self.inner.extend(items, lease)  # type: ignore[no-any-return]

    async def claim(self, batch: int, lease: float) -> Sequence[Any]:
        attributes = {
            **self._base,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "claim",
            "drainpipe.batch_size": batch,
        }
        with self.otel.span(f"{self._prefix}.claim", attributes, kind="CLIENT") as span:
            items: Sequence[Any] = await self.inner.claim(batch, lease)
            span.set_attribute("messaging.batch.message_count", len(items))
        return items

    async def complete(self, items: Sequence[Any]) -> Sequence[Any]:
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "complete",
            "messaging.batch.message_count": len(items),
        }
        with self.otel.span(f"{self._prefix}.complete", attributes, kind="CLIENT") as span:
            refused: Sequence[Any] = await self.inner.complete(items)
            span.set_attribute("drainpipe.refused", len(refused))
        self._processed.add(len(items) - len(refused), self._labels)
        return refused

    async def _complete_and_claim(
        self, items: Sequence[Any], batch: int, lease: float
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """One span for the fused call: what it settled, what it refused, what it claimed."""
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "complete_and_claim",
            "messaging.batch.message_count": len(items),
            "drainpipe.batch_size": batch,
        }
        with self.otel.span(
            f"{self._prefix}.complete_and_claim", attributes, kind="CLIENT"
        ) as span:
            refused, claimed = await self.inner.complete_and_claim(items, batch, lease)
            span.set_attribute("drainpipe.refused", len(refused))
            span.set_attribute("drainpipe.claimed", len(claimed))
        self._processed.add(len(items) - len(refused), self._labels)
        return refused, claimed

    async def fail(
        self,
        item: Any,
        error: str,
        retry_in: float | None,
        code: str | None = None,
        discard: bool = False,
    ) -> Any:
        attributes = {
            **self._base,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "fail",
            "messaging.message.id": str(item.id),
        }
        with self.otel.span(f"{self._prefix}.fail", attributes, kind="CLIENT") as span:
            outcome = await self.inner.fail(item, error, retry_in, code, discard)
            if isinstance(outcome, str):
                span.set_attribute("drainpipe.fail.outcome", outcome)
        self._failed.add(1, self._labels)
        if outcome == "dead" and self._dead is not None:
            self._dead.add(1, self._labels)
        return outcome

    def start(self, item: Any) -> Awaitable[Any]:
        return self._run(item)

    async def _run(self, item: Any) -> Any:
        otel = self.otel
        parent, links = otel.job_parent(self.inner.trace_of(item))
        attributes = {
            **self._base,
            "messaging.operation.type": "process",
            "messaging.message.id": str(item.id),
            "drainpipe.attempt": item.attempts,
        }
        if self.concept != "jobs":
            attributes["drainpipe.webhook.message_id"] = item.message_id
        outcome = "failed"
        started = time.perf_counter()
        with otel.tracer.start_as_current_span(
            self._run_name,
            context=parent,
            kind=otel._trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = self.inner.start(item)
                if inspect.isawaitable(result):
                    result = await result
                outcome = "succeeded"
                return result
            except Retry:
                outcome = "retry"  # asked for, not an error
                raise
            except Suspend:
                outcome = "suspended"  # a sleep, a wait or the budget: not an error
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"  # the lease was lost, or the run is being stopped
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(otel._trace.Status(otel._trace.StatusCode.ERROR, error_text(exc)))
                raise
            finally:
                span.set_attribute("drainpipe.outcome", outcome)
                otel.handler_duration.record(
                    time.perf_counter() - started, self._by_outcome[outcome]
                )
