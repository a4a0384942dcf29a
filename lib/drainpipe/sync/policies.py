# generated from lib/drainpipe/jobs/guard.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""What :class:`~drainpipe.jobs.Jobs` does for queue policies and encrypted payloads
(docs/reference.md section 9; docs/policies.md): the client-side checks, sealing on enqueue, opening
on claim, ``ensure_policies``, ``reencrypt`` and ``apply_retention``."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..context import wrap_payload
from ..errors import NOT_INSTALLED, DrainpipeError, invalid_request
from ..jobs.job_rules import DEFAULT_LEASE
from ..jobs.policy import DEADLINE_PASSED, PAYLOAD_UNREADABLE, QueuePolicy, check_policies
from ..models import DeadJob, FailOutcome, Job, JobContext, JobRecord
from ..validation import MAX_PAYLOAD_BYTES
from .records import SyncRecordsMixin

if TYPE_CHECKING:
    from ..keyring import Keyring
    from .backend import SyncSqlBackend

# The keyring and sealing modules (hmac, secrets, cryptography) are imported only by a
# Jobs that has a keyring: a function without encrypted queues does not pay for them.

log = logging.getLogger("drainpipe.jobs")

#: The attempts of a job on a queue without a policy when none is given (section 2).
DEFAULT_MAX_ATTEMPTS = 5
#: The drain route applies retention at most this often (seconds).
RETENTION_EVERY = 3600.0


def bury(driver: SyncSqlBackend, job: Job[Any], error: str, code: str) -> FailOutcome | None:
    """End a held job dead now with ``code`` (a driver without dead letters, such as
    ``pgmq_public``, archives it: its only terminal state); None when the lease was lost."""
    return "dead" if driver.bury(job, error, code) else None


def retry_delay(attempt: int) -> float:
    """The SQL's jittered backoff (``drainpipe.job_retry_delay``): whole seconds uniform in
    [1, min(3600, 10 * 2^(attempt-1))]. Computed here for a windowed queue, so the client
    knows when the retry would start before it is scheduled."""
    import random

    cap = min(3600, 10 * 2 ** min(max(attempt, 1) - 1, 20))
    return float(1 + math.floor(random.random() * cap))  # noqa: S311 - jitter, not a secret


def first_attempt_start(driver: SyncSqlBackend, job: Job[Any]) -> datetime | None:
    """When the job's first attempt started, from its record (None without records)."""
    if "get_record" in driver.lacks:
        return None  # a storage without records cannot say: the window is not enforced
    try:
        record = driver.get_record(job.queue, job.id)
    except DrainpipeError as exc:
        if exc.code == NOT_INSTALLED:  # storage without records yet (pgmq, issue 14)
            return None
        raise
    if record is None:
        return None
    starts = [a.started_at for a in record.history if a.number == 1 and a.started_at]
    return starts[0] if starts else record.started_at


def fail_within_window(
    driver: SyncSqlBackend,
    policy: QueuePolicy | None,
    job: Job[Any],
    error: str,
    retry_in: float | None,
) -> tuple[bool, float | None, FailOutcome | None]:
    """A failure on a queue with an ``attempt_window``: ``(True, None, outcome)`` when the
    job ended dead with ``DEADLINE_PASSED`` because its retry could only start after the
    window (counted from the first attempt's start); else ``(False, retry_in, None)`` with
    the delay to retry after (chosen here when it was None, so the check holds)."""
    window = None if policy is None else policy.attempt_window
    if window is None or job.attempts >= job.max_attempts:
        return False, retry_in, None  # no window, or MAX_ATTEMPTS ends it anyway
    delay = retry_delay(job.attempts) if retry_in is None else retry_in
    first = first_attempt_start(driver, job)
    if first is None:
        return False, delay, None
    if datetime.now(UTC) + timedelta(seconds=delay) > first + timedelta(seconds=window):
        return True, None, bury(driver, job, error, DEADLINE_PASSED)
    return False, delay, None


def _is_keyring(value: Any) -> bool:
    from ..keyring import Keyring

    return isinstance(value, Keyring)


class SyncPolicyMixin(SyncRecordsMixin):
    """Policies and the keyring of a :class:`~drainpipe.jobs.Jobs`."""

    backend: SyncSqlBackend
    driver: SyncSqlBackend
    keyring: Keyring | None
    _policies: dict[str, QueuePolicy]

    def _init_policies(self, policies: Any, keyring: Any, queues: Sequence[str]) -> None:
        self._policies = check_policies(policies, queues)
        if keyring is not None and not _is_keyring(keyring):
            raise TypeError("keyring must be a drainpipe.Keyring (Keyring.from_env())")
        self.keyring = keyring
        self._sealed_queues = frozenset(q for q, p in self._policies.items() if p.encrypt)
        self._windowed = frozenset(
            q for q, p in self._policies.items() if p.attempt_window is not None
        )
        if self._sealed_queues and keyring is None:
            raise ValueError(
                f"queue {sorted(self._sealed_queues)[0]} is encrypted: pass"
                " keyring=drainpipe.Keyring.from_env()"
            )

    @property
    def policies(self) -> Mapping[str, QueuePolicy]:
        return dict(self._policies)

    def policy(self, queue: str) -> QueuePolicy | None:
        return self._policies.get(queue)

    def get(self, queue: str, job_id: int) -> JobRecord | None:
        """The job's record; on a queue with an ``attempt_window`` its ``deadline`` is the
        first attempt's start plus the window (None before the first attempt)."""
        record = super().get(queue, job_id)
        policy = self._policies.get(queue)
        if record is None or policy is None or policy.attempt_window is None:
            return record
        starts = [a.started_at for a in record.history if a.number == 1 and a.started_at]
        first = starts[0] if starts else (record.started_at if record.attempts == 1 else None)
        if first is None:
            return record
        return dataclasses.replace(
            record, deadline=first + timedelta(seconds=policy.attempt_window)
        )

    # -- the client's checks ---------------------------------------------------------------

    def _claim_lease(self, queue: str, lease: float | None) -> float:
        """A claim's or extend's lease: the policy's default when None, refused over
        ``max_lease`` (``invalid_request``, code ``LEASE_TOO_LONG``)."""
        policy = self._policies.get(queue)
        if policy is None:
            return DEFAULT_LEASE if lease is None else lease
        return policy.lease if lease is None else policy.check_lease(lease)

    def _max_attempts(self, queue: str, max_attempts: int | None) -> int:
        policy = self._policies.get(queue)
        if policy is None:
            return DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
        return (
            policy.max_attempts if max_attempts is None else min(max_attempts, policy.max_attempts)
        )

    def _payload_limit(self, queue: str) -> int:
        policy = self._policies.get(queue)
        return MAX_PAYLOAD_BYTES if policy is None else policy.max_payload_bytes

    def _check_delay(self, queue: str, delay: float) -> None:
        policy = self._policies.get(queue)
        if policy is not None:
            policy.check_delay(delay)

    def _store(self, queue: str, payload: Any, context: JobContext | None) -> Any:
        """The stored value: the context envelope, sealed on an encrypted queue."""
        stored = wrap_payload(payload, context)
        if queue in self._sealed_queues:
            from ..jobs.sealing import seal

            assert self.keyring is not None
            return seal(self.keyring, queue, stored, context)
        return stored

    def _stored_dedupe_key(self, queue: str, key: str | None) -> str | None:
        """On an encrypted queue a dedupe key is stored as a keyed hash (docs/policies.md)."""
        if key is None or queue not in self._sealed_queues:
            return key
        assert self.keyring is not None
        return self.keyring.dedupe_hash(queue, key)

    # -- reading sealed jobs -----------------------------------------------------------------

    def _open_claimed(self, jobs: list[Job[Any]]) -> list[Job[Any]]:
        """Claimed jobs with sealed payloads opened; one that does not open ends dead with
        ``PAYLOAD_UNREADABLE`` (logged by id, never its bytes) and is left out."""
        keyring = self.keyring
        if keyring is None:
            return jobs
        from ..jobs.sealing import is_sealed, open_job, unreadable
        from ..keyring import UnreadableCiphertext

        if not any(is_sealed(job.payload) for job in jobs):
            return jobs
        opened: list[Job[Any]] = []
        for job in jobs:
            try:
                opened.append(open_job(keyring, job))
            except UnreadableCiphertext as exc:
                error = unreadable(job.id, job.queue, str(exc))
                log.error("drainpipe: %s", error, extra={"queue": job.queue, "job_id": job.id})
                bury(self.driver, job, str(error), PAYLOAD_UNREADABLE)
        return opened

    def _opened(self, dead: DeadJob) -> DeadJob:
        if self.keyring is None:
            return dead
        from ..jobs.sealing import is_sealed, open_stored
        from ..keyring import UnreadableCiphertext

        if not is_sealed(dead.payload):
            return dead
        try:
            payload, context = open_stored(self.keyring, dead.queue, dead.payload)
        except UnreadableCiphertext:
            return dead  # listed as stored: the sealed form, never a guess
        return DeadJob(
            id=dead.id,
            queue=dead.queue,
            payload=payload,
            context=context,
            attempts=dead.attempts,
            max_attempts=dead.max_attempts,
            last_error=dead.last_error,
            enqueued_at=dead.enqueued_at,
            died_at=dead.died_at,
        )

    # -- operations --------------------------------------------------------------------------

    def ensure_policies(self) -> int:
        """Store every declared policy where the database's checks read it, so every
        writer obeys them; how many were stored. Idempotent (run it at each deploy)."""
        if not self._policies:
            return 0
        for queue, policy in self._policies.items():
            self.driver.ensure_policy(queue, policy.as_row(queue))
        return len(self._policies)

    def apply_retention(self) -> int:
        """Delete terminal records (and with them their dedupe keys) older than their
        queue's ``retention``; live jobs are never touched. Returns how many were deleted."""
        return int(self.driver.apply_retention(min_interval=None) or 0)

    def apply_retention_if_due(self, every: float = RETENTION_EVERY) -> int | None:
        """:meth:`apply_retention` unless it ran less than ``every`` seconds ago in this
        database (None then); two callers at once run it once."""
        if not self._policies:
            return None
        return self.driver.apply_retention(min_interval=every)

    def reencrypt(self, queue: str, *, batch: int = 500) -> int:
        """Seal again under the keyring's first key every live job of ``queue`` that is not
        (older keys, or stored in clear); returns how many were rewritten. A job that does
        not open is left for its claim to end dead with ``PAYLOAD_UNREADABLE``."""
        if queue not in self._sealed_queues:
            raise invalid_request(f'Queue "{queue}" is not encrypted (QueuePolicy(encrypt=True))')
        driver = self.driver
        assert self.keyring is not None
        from ..jobs.sealing import reseal
        from ..keyring import UnreadableCiphertext

        rewritten = 0
        after = 0
        while True:
            page = driver.live_payloads(queue, after=after, limit=batch)
            if not page:
                return rewritten
            for job_id, stored in page:
                after = max(after, job_id)
                try:
                    fresh = reseal(self.keyring, queue, stored)
                except UnreadableCiphertext:
                    log.warning(
                        "drainpipe: queue %s job %s does not decrypt; left as is",
                        queue,
                        job_id,
                        extra={"queue": queue, "job_id": job_id},
                    )
                    continue
                if fresh is not None and driver.rewrite_payload(queue, job_id, stored, fresh):
                    rewritten += 1
