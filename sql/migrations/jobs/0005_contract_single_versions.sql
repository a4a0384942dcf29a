-- drainpipe's jobs: one version per function. The client calls the newest; the older
-- versions only wrapped it and nothing calls them any more:
--   fail_job_v1             -> fail_job_v2 (code HANDLER_ERROR, not discarded)
--   retry_dead_jobs_v1      -> retry_dead_jobs_v2 (the client counts the rows that made a child)
--   replay_dead_job_v2      -> replay_dead_job_v3 (the client raises a refusal by the rules)
--   audited_replay_job_v1   -> audited_replay_job_v2
--   ensure_queue_policy_v1, _v2 -> ensure_queue_policy_v3, which took their bodies (0004)
--   job_queue_stats_v3 (and its row type) -> job_queue_stats_v4, which reads the pause
--                                           itself (0004)
DROP FUNCTION IF EXISTS drainpipe.fail_job_v1(text, bigint, integer, text, double precision, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.retry_dead_jobs_v1(text, bigint[], integer);
DROP FUNCTION IF EXISTS drainpipe.replay_dead_job_v2(text, bigint, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.audited_replay_job_v1(text, text, text, bigint, text, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.ensure_queue_policy_v2(text, integer, integer, double precision, double precision, double precision, integer, double precision, double precision, boolean, double precision, boolean);
DROP FUNCTION IF EXISTS drainpipe.ensure_queue_policy_v1(text, integer, integer, double precision, double precision, double precision, integer, double precision, double precision, boolean);
DROP FUNCTION IF EXISTS drainpipe.job_queue_stats_v3(text[]);
DROP TYPE IF EXISTS drainpipe.job_queue_stats_v3;
