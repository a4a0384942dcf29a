-- CONTRACT (applied only with install(..., contract=True) / `drainpipe sql apply
-- --contract`): drops release 0's unversioned functions once no code of that release runs
-- any more (after the rolling deploy finished). The _v1 functions stay.
DROP FUNCTION IF EXISTS drainpipe.enqueue_job(text, jsonb, double precision, integer, text, boolean);
DROP FUNCTION IF EXISTS drainpipe.enqueue_jobs(text, jsonb, double precision, integer);
DROP FUNCTION IF EXISTS drainpipe.claim_jobs(text, double precision, integer);
DROP FUNCTION IF EXISTS drainpipe.complete_job(text, bigint, integer);
DROP FUNCTION IF EXISTS drainpipe.complete_jobs(text, bigint[], integer[]);
DROP FUNCTION IF EXISTS drainpipe.fail_job(text, bigint, integer, text, double precision);
DROP FUNCTION IF EXISTS drainpipe.extend_job_lease(text, bigint, integer, double precision);
DROP FUNCTION IF EXISTS drainpipe.extend_job_leases(text, bigint[], integer[], double precision);
DROP FUNCTION IF EXISTS drainpipe.retry_dead_jobs(text, bigint[], integer);
DROP FUNCTION IF EXISTS drainpipe.replay_dead_job(text, bigint);
DROP FUNCTION IF EXISTS drainpipe.job_queue_stats(text[]);
DROP FUNCTION IF EXISTS drainpipe.list_dead_jobs(text, integer, bigint);
DROP FUNCTION IF EXISTS drainpipe.purge_job_archive(text, interval, integer, interval);
DROP FUNCTION IF EXISTS drainpipe.index_job_queue(text);
DROP FUNCTION IF EXISTS drainpipe.ensure_job_queue(text);
DROP FUNCTION IF EXISTS drainpipe.define_job_queue_functions(text);
DROP FUNCTION IF EXISTS drainpipe.schedule_job(text, text, text, jsonb, text, timestamptz, text);
DROP FUNCTION IF EXISTS drainpipe.unschedule_job(text);
DROP FUNCTION IF EXISTS drainpipe.list_schedules(text, text);
DROP FUNCTION IF EXISTS drainpipe.unschedule_tenant(text);
DROP FUNCTION IF EXISTS drainpipe.claim_due_schedules(double precision, integer);
DROP FUNCTION IF EXISTS drainpipe.advance_schedule(text, timestamptz, timestamptz, uuid);
