-- drainpipe's jobs: one version per function. The client calls the newest; these older
-- versions wrapped it and nothing calls them any more.
--   fail_job_v1           -> fail_job_v2 (code HANDLER_ERROR, not discarded)
--   retry_dead_jobs_v1    -> retry_dead_jobs_v2 (the client counts the rows that made a child)
--   replay_dead_job_v2    -> replay_dead_job_v3 (the client raises a refusal by the rules)
--   audited_replay_job_v1 -> audited_replay_job_v2
DROP FUNCTION IF EXISTS drainpipe.fail_job_v1(text, bigint, integer, text, double precision, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.retry_dead_jobs_v1(text, bigint[], integer);
DROP FUNCTION IF EXISTS drainpipe.replay_dead_job_v2(text, bigint, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.audited_replay_job_v1(text, text, text, bigint, text, timestamptz);
