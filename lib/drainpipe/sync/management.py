# generated from lib/drainpipe/console/client.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
"""``ManagementClient``: the Job Inbox API from trusted Python code, over httpx.

    with ManagementClient("https://app.example.com/api/jobs", token) as client:
        for job in client.list(queue="emails", state="dead"):
            new = client.replay(job["queue"], job["id"])

Every answer is the response's ``data``; a Problem raises :class:`~drainpipe.DrainpipeError`
with the server's kind, status and code. Only ``replay`` retries by itself (a lost answer,
a 5xx, a 409 ``IDEMPOTENCY_KEY_IN_USE``), always with the one Idempotency-Key it made for
that call, so a retry can never replay a job twice.

``drainpipe.sync.ManagementClient`` is generated from this module (``./scripts/sync-twin``):
the same calls over httpx's sync client, without ``await``.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import httpx

from ..console.wire import (
    answer_of,
    bulk_body,
    check_client,
    job_path,
    list_params,
    problem_error,
    queue_path,
    retryable,
)
from ..errors import DrainpipeError


class ManagementClient:
    """A client of one Job Inbox (``base_url``: where the app is mounted) with a bearer
    ``token``. ``retries``/``backoff`` bound replay's own retries; ``timeout`` is seconds
    per request; ``transport`` is an httpx transport (``httpx.ASGITransport(app)`` for the
    async client in tests, ``httpx.WSGITransport`` for the sync one)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url, headers = check_client(base_url, token, retries)
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:  # the token stays out of logs
        return f"{type(self).__name__}({self.base_url!r})"

    def _request(self, method: str, path: str, **options: Any) -> tuple[Any, Any]:
        try:
            response = self._http.request(method, path, **options)
        except httpx.TimeoutException as exc:
            raise DrainpipeError("timeout", f"{method} {path} timed out") from exc
        except httpx.HTTPError as exc:
            raise DrainpipeError("network", f"{method} {path}: {exc}") from exc
        if response.status_code >= 400:
            raise problem_error(response)
        try:
            body = response.json()
        except ValueError as exc:
            raise DrainpipeError("unexpected", f"{method} {path}: not a JSON answer") from exc
        return answer_of(body)

    def list(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
    ) -> Iterator[dict[str, Any]]:
        """Every matching record, newest first, fetched ``limit`` per page."""
        yield from self._pages("/jobs", list_params(queue, state, tenant, limit))

    def audit(self, *, limit: int = 100) -> Iterator[dict[str, Any]]:
        """Every audit entry of the target, newest first (admins only)."""
        yield from self._pages("/audit", {"limit": limit})

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            page_params = dict(params) if cursor is None else {**params, "cursor": cursor}
            data, meta = self._request("GET", path, params=page_params)
            yield from data
            cursor = meta.get("next_cursor")
            if not cursor:
                return

    def get(self, queue: str, job_id: int) -> dict[str, Any]:
        """The record with its attempt history; ``not_found`` when unknown."""
        data, _ = self._request("GET", job_path(queue, job_id))
        return cast(dict[str, Any], data)

    def cancel(self, queue: str, job_id: int) -> dict[str, Any]:
        """Cancel a live job; its record. A terminal one raises ``conflict``
        (``JOB_NOT_CANCELLABLE``). Not retried: a repeat of a cancel that did land answers 409."""
        data, _ = self._request("POST", job_path(queue, job_id) + "/cancel")
        return cast(dict[str, Any], data)

    def replay(
        self, queue: str, job_id: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Replay a dead job: ``{"id": new, "parent_id": job_id}``. One key per call (or
        yours, to carry it across processes), reused on each of this call's retries."""
        key = idempotency_key or str(uuid.uuid4())
        path = job_path(queue, job_id) + "/replay"
        attempt = 0
        while True:
            try:
                data, _ = self._request("POST", path, headers={"Idempotency-Key": key}, content=b"")
                return cast(dict[str, Any], data)
            except DrainpipeError as exc:
                if attempt >= self.retries or not retryable(exc):
                    raise
            attempt += 1
            time.sleep(self.backoff * 2 ** (attempt - 1))

    # -- the console (docs/job-inbox.md#the-console) ----------------------------------------

    def queues(self) -> builtins.list[dict[str, Any]]:
        """One summary per declared queue: counts per state, paused, oldest_ready_age_s,
        held, and the last hour's per-minute series."""
        data, _ = self._request("GET", "/queues")
        return cast(builtins.list[dict[str, Any]], data)

    def inboxes(self) -> builtins.list[dict[str, Any]]:
        """One summary per agent inbox (when the app was given ``agents``; else
        ``not_found``): ``{"inbox", "name", "counts": {state: n}, "open_streams",
        "oldest_open_age_s"}``."""
        data, _ = self._request("GET", "/inboxes")
        return cast(builtins.list[dict[str, Any]], data)

    def pause(self, queue: str) -> dict[str, Any]:
        """Pause a queue (admins; audited); its summary."""
        data, _ = self._request("POST", queue_path(queue, "pause"), content=b"")
        return cast(dict[str, Any], data)

    def resume(self, queue: str) -> dict[str, Any]:
        """Resume a queue (admins; audited); its summary."""
        data, _ = self._request("POST", queue_path(queue, "resume"), content=b"")
        return cast(dict[str, Any], data)

    def bulk_cancel(
        self, filter: dict[str, Any], expected: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Cancel every job ``filter`` matches, when that is exactly ``expected`` jobs
        (else ``conflict`` ``BULK_COUNT_CHANGED``, the count in the error's ``meta``):
        ``{"matched", "done", "refused"}``. Retried like ``replay``, with one key."""
        return self._bulk("cancel", filter, expected, idempotency_key)

    def bulk_replay(
        self, filter: dict[str, Any], expected: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Replay every job ``filter`` matches, as ``bulk_cancel`` cancels; each job goes
        through the single replay's rules (a refusal counts in ``refused``)."""
        return self._bulk("replay", filter, expected, idempotency_key)

    def _bulk(
        self, action: str, where: dict[str, Any], expected: int, key: str | None
    ) -> dict[str, Any]:
        body = bulk_body(where, expected)
        key = key or str(uuid.uuid4())
        attempt = 0
        while True:
            try:
                data, _ = self._request(
                    "POST", f"/jobs/bulk/{action}", headers={"Idempotency-Key": key}, json=body
                )
                return cast(dict[str, Any], data)
            except DrainpipeError as exc:
                if attempt >= self.retries or not retryable(exc):
                    raise
            attempt += 1
            time.sleep(self.backoff * 2 ** (attempt - 1))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ManagementClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
