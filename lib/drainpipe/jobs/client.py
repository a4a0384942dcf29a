"""Jobs: typed queues on Postgres with leases, fenced completion, retries and dead letters.

The checks and payload handling are :class:`~drainpipe.jobs.job_rules.JobRules`, shared with
the sync twin; this class runs the checked calls on its (async) backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ..backends import QueueBackend, resolve_backend
from ..backends.reduced import as_driver
from ..models import DedupeMode, Job
from ..schedules import ScheduleMixin
from ..telemetry import active_telemetry
from .archive import ArchiveMixin
from .enqueue_calls import EnqueueMixin
from .events import EventsMixin
from .job_rules import MAX_DEDUPE_KEY, SEVEN_DAYS, THIRTY_DAYS, JobRules
from .pause_calls import PauseMixin
from .record_calls import RecordsMixin
from .replay_calls import ReplaysMixin
from .replays import ReplayCheck, check_replay_check
from .worker import WorkMixin

if TYPE_CHECKING:
    from ..backends.driver import Driver
    from ..console.management_app import ManagementApp
    from ..keyring import Keyring
    from .drain_route import DrainRoute
    from .policy import QueuePolicy
    from .queue import Queue

__all__ = ["MAX_DEDUPE_KEY", "SEVEN_DAYS", "THIRTY_DAYS", "Handler", "Jobs", "OnError"]

T = TypeVar("T")
Handler = Callable[[Any, Job[Any]], Awaitable[Any]]
OnError = Callable[[BaseException, Job[Any] | None], Any]


class Jobs(
    ReplaysMixin,
    PauseMixin,
    EnqueueMixin,
    WorkMixin,
    JobRules,
    RecordsMixin,
    ScheduleMixin,
    ArchiveMixin,
    EventsMixin,
):
    """Typed job queues on a database (DSN, pool, connection), a supabase client or a backend.

    ``queues`` maps each queue name to the payload schema (anything
    ``pydantic.TypeAdapter`` accepts). ``now`` is the clock for ``run_at`` and schedules.
    ``scheduler`` says which scheduler the ``jobs`` SQL module was installed with.
    ``cursor_secret`` signs ``list_jobs`` cursors (default: a random key per process).
    ``policies`` maps queues to :class:`~drainpipe.QueuePolicy` (checked before sending;
    ``ensure_policies()`` makes the database enforce them too); ``keyring`` opens and seals
    the payloads of encrypted queues (docs/policies.md). ``replay_check(record) -> None |
    code`` (plain or async) runs before each replay; a code refuses it with 409 and that
    code (docs/policies.md#replaying-safely).
    """

    def __init__(
        self,
        db: Any,
        queues: Mapping[str, Any],
        *,
        now: Callable[[], datetime] | None = None,
        scheduler: Literal["drain", "pg_cron"] = "drain",
        policies: Mapping[str, QueuePolicy] | None = None,
        keyring: Keyring | None = None,
        cursor_secret: str | bytes | None = None,
        replay_check: ReplayCheck | None = None,
    ) -> None:
        super().__init__(queues, now=now, scheduler=scheduler, cursor_secret=cursor_secret)
        self._init_policies(policies, keyring, list(queues))
        self._replay_check = check_replay_check(replay_check)
        #: what the caller gave (or the backend built from it), as given
        self.backend: QueueBackend = resolve_backend(db, list(queues))
        #: every call goes here: the backend itself when complete, else it made complete
        #: by :mod:`drainpipe.backends.reduced` (what it lacks answers from one table)
        self.driver: Driver = as_driver(self.backend)

    # -- tracing: the checked calls are EnqueueMixin's (shared with the sync twin) ------

    async def _send(
        self,
        queue: str,
        value: Any,
        wait: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
    ) -> int:
        send = super()._send
        otel = active_telemetry()
        if otel is None:
            return await send(queue, value, wait, max_attempts, dedupe_key, dedupe)
        return await otel.enqueue(
            queue, value, lambda traced: send(queue, traced, wait, max_attempts, dedupe_key, dedupe)
        )

    async def _send_flow(
        self,
        queue: str,
        value: Any,
        wait: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
        key: str,
        debounce: float | None,
        throttle: float | None,
    ) -> int:
        send = super()._send_flow

        def sent(stored: Any) -> Awaitable[int]:
            return send(
                queue, stored, wait, max_attempts, dedupe_key, dedupe, key, debounce, throttle
            )

        otel = active_telemetry()
        if otel is None:
            return await sent(value)
        # the same drainpipe.enqueue span as a plain enqueue, its context stored with the
        # payload: a debounced job runs under the trace of the enqueue that set its payload
        # last; a throttled enqueue inside its window stores nothing and the span names the
        # job it returned
        return await otel.enqueue(queue, value, sent)

    async def _send_many(
        self, queue: str, values: list[Any], wait: float, max_attempts: int
    ) -> list[int]:
        send = super()._send_many
        otel = active_telemetry()
        if otel is None:
            return await send(queue, values, wait, max_attempts)
        return await otel.enqueue_many(
            queue, values, lambda traced: send(queue, traced, wait, max_attempts)
        )

    # -- typed handles and the drain route -----------------------------------------------

    @overload
    def queue(self, name: str) -> Queue[Any]: ...
    @overload
    def queue(self, name: str, schema: type[T]) -> Queue[T]: ...

    def queue(self, name: str, schema: Any = None) -> Queue[Any]:
        """A handle bound to one queue. Pass the declared schema to get ``Queue[Model]``,
        so a wrong payload type is a type-checker error."""
        self._check_queue(name)
        if schema is not None and schema is not self._schemas[name]:
            raise ValueError(f'Queue "{name}" was declared with another schema')
        from .queue import Queue

        return Queue(self, name)

    async def close(self) -> None:
        """Release what this object opened for itself: the pool of a DSN it was given, the
        HTTP client of a URL-built PostgREST backend. Pools, connections and clients you
        passed in stay open. Also ``async with Jobs(...) as jobs:``."""
        db = getattr(self.backend, "db", None)
        close = getattr(db, "close", None) or getattr(self.backend, "aclose", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> Jobs:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def drain_route(self, **options: Any) -> DrainRoute:
        """An ASGI app a cron caller hits: see :class:`drainpipe.jobs.drain_route.DrainRoute`."""
        from .drain_route import DrainRoute

        return DrainRoute(self, **options)

    def management_app(self, **options: Any) -> ManagementApp:
        """The Job Inbox's ASGI app (API, admin page): see :class:`drainpipe.console.management_app.ManagementApp`."""
        from ..console.management_app import ManagementApp

        return ManagementApp(self, **options)

    def executor_app(
        self,
        *,
        tokens: Mapping[str, Collection[str] | Literal["*"]],
        budget: float = 25.0,
        lease_secret: str | bytes | None = None,
        allowed_origins: Collection[str] | None = None,
    ) -> Any:
        """Private endpoints for executors that claim and settle jobs over HTTP with the
        agent inbox's pull protocol (docs/reference.md section 11): see :mod:`drainpipe.jobs.executor`."""
        from .executor import build_executor_app

        return build_executor_app(
            self,
            tokens=tokens,
            budget=budget,
            lease_secret=lease_secret,
            allowed_origins=allowed_origins,
        )
