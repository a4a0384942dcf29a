"""``drainpipe.sync.ManagementClient``: the Job Inbox API from synchronous code (a Django
admin action, a script, a notebook), the twin of :class:`drainpipe.ManagementClient`.

The options, paths, parameters and the reading of Problems are
:mod:`drainpipe.console.wire`, shared with the async client; ``replay`` retries the same way
(a lost answer, a 5xx, a 409 ``IDEMPOTENCY_KEY_IN_USE``) with the one Idempotency-Key it
made for that call, so a retry never replays a job twice.
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

__all__ = ["ManagementClient"]


class ManagementClient:
    """A client of one Job Inbox (``base_url``: where the app is mounted) with a bearer
    ``token``; ``transport`` is an ``httpx.BaseTransport`` (e.g. ``httpx.WSGITransport``)."""

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
        return f"sync.ManagementClient({self.base_url!r})"

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
        return self._pages("/jobs", list_params(queue, state, tenant, limit))

    def audit(self, *, limit: int = 100) -> Iterator[dict[str, Any]]:
        """Every audit entry of the target, newest first (admins only)."""
        return self._pages("/audit", {"limit": limit})

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
        """Cancel a live job; its record. A terminal one raises ``conflict``."""
        data, _ = self._request("POST", job_path(queue, job_id) + "/cancel")
        return cast(dict[str, Any], data)

    def replay(
        self, queue: str, job_id: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Replay a dead job: ``{"id": new, "parent_id": job_id}``; one key per call."""
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
        """One summary per declared queue (see :meth:`drainpipe.ManagementClient.queues`)."""
        data, _ = self._request("GET", "/queues")
        return cast(builtins.list[dict[str, Any]], data)

    def inboxes(self) -> builtins.list[dict[str, Any]]:
        """One summary per agent inbox (see :meth:`drainpipe.ManagementClient.inboxes`)."""
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
        """See :meth:`drainpipe.ManagementClient.bulk_cancel`."""
        return self._bulk("cancel", filter, expected, idempotency_key)

    def bulk_replay(
        self, filter: dict[str, Any], expected: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """See :meth:`drainpipe.ManagementClient.bulk_replay`."""
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
