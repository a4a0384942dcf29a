from __future__ import annotations

from pydantic import BaseModel

import drainpipe


class Email(BaseModel):
    to: str


async def test_round_trip(jobs_db_url: str) -> None:
    jobs = drainpipe.Jobs(jobs_db_url, {"emails": Email})
    job_id = await jobs.enqueue("emails", {"to": "a@example.com"})
    [job] = await jobs.claim("emails", lease=30)
    assert job.id == job_id and job.attempts == 1 and job.payload == {"to": "a@example.com"}
    assert await jobs.complete(job) is True
    assert await jobs.complete(job) is False
    seen: list[Email] = []

    async def handle(payload: Email, job: drainpipe.Job[Email]) -> None:
        seen.append(payload)

    await jobs.enqueue_many("emails", [{"to": "b@x"}, {"to": "c@x"}])
    report = await jobs.drain("emails", handle, batch=10)
    assert (report.succeeded, report.failed) == (2, 0)
    assert [e.to for e in seen] == ["b@x", "c@x"]
    stats = await jobs.stats()
    assert stats["emails"].ready == 0
    await jobs.backend.db.close()  # type: ignore[attr-defined]
