-- drainpipe's jobs: one version per function. The client calls the newest; the older
-- versions only wrapped it and nothing calls them any more:
--   fail_job_v1             -> fail_job_v2 (code HANDLER_ERROR, not discarded)
--   retry_dead_jobs_v1      -> retry_dead_jobs_v2 (the client counts the rows that made a child)
--   replay_dead_job_v2      -> replay_dead_job_v3 (the client raises a refusal by the rules)
--   audited_replay_job_v1   -> audited_replay_job_v2
--   ensure_queue_policy_v1, _v2 -> ensure_queue_policy_v3, which took their bodies first
-- Until this contract migration runs, v3 keeps calling v2 (which calls v1): the same rows.

SET check_function_bodies = off;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v3(p_queue text, p_max_payload_bytes integer, p_max_pending integer, p_lease double precision, p_max_lease double precision, p_max_delay double precision, p_max_attempts integer, p_attempt_window double precision, p_retention double precision, p_encrypt boolean, p_replay_window double precision, p_replayable boolean, p_concurrency integer DEFAULT NULL::integer, p_key_concurrency integer DEFAULT NULL::integer, p_rate_count integer DEFAULT NULL::integer, p_rate_per double precision DEFAULT NULL::double precision, p_key_rate_count integer DEFAULT NULL::integer, p_key_rate_per double precision DEFAULT NULL::double precision, p_ordered boolean DEFAULT false)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- before the policy row: a replay in flight holds this lock shared (see
    -- replay_rules_in_force), so a queue's first policy, which has no row a replay could
    -- have locked yet, is ordered with replays too
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_policies AS p (queue, max_payload_bytes, max_pending, lease,
        max_lease, max_delay, max_attempts, attempt_window, retention, encrypt, replay_window,
        replayable)
    VALUES (p_queue, p_max_payload_bytes, p_max_pending, p_lease, p_max_lease, p_max_delay,
            p_max_attempts, p_attempt_window, p_retention, p_encrypt, p_replay_window,
            coalesce(p_replayable, true))
    ON CONFLICT (queue) DO UPDATE SET
        max_payload_bytes = excluded.max_payload_bytes, max_pending = excluded.max_pending,
        lease = excluded.lease, max_lease = excluded.max_lease, max_delay = excluded.max_delay,
        max_attempts = excluded.max_attempts, attempt_window = excluded.attempt_window,
        retention = excluded.retention, encrypt = excluded.encrypt,
        replay_window = excluded.replay_window, replayable = excluded.replayable,
        updated_at = clock_timestamp();
    PERFORM drainpipe.attach_queue_policy_v1(p_queue);
    PERFORM drainpipe.ensure_queue_flow_v1(p_queue, p_concurrency, p_key_concurrency,
        p_rate_count, p_rate_per, p_key_rate_count, p_key_rate_per, p_ordered);
END $function$;

RESET check_function_bodies;

DROP FUNCTION IF EXISTS drainpipe.fail_job_v1(text, bigint, integer, text, double precision, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.retry_dead_jobs_v1(text, bigint[], integer);
DROP FUNCTION IF EXISTS drainpipe.replay_dead_job_v2(text, bigint, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.audited_replay_job_v1(text, text, text, bigint, text, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.ensure_queue_policy_v2(text, integer, integer, double precision, double precision, double precision, integer, double precision, double precision, boolean, double precision, boolean);
DROP FUNCTION IF EXISTS drainpipe.ensure_queue_policy_v1(text, integer, integer, double precision, double precision, double precision, integer, double precision, double precision, boolean);
