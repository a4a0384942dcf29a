-- drainpipe's jobs: one body where a function only called its older version.
-- ensure_queue_policy_v3 writes the whole policy row (v2 and v1 did it in two steps);
-- job_queue_stats_v4 reads the storage's counts (job_queue_stats_v2) and the pause itself
-- instead of through job_queue_stats_v3, which only added the pause. The older versions
-- go in the contract migration (0005).

SET check_function_bodies = off;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v4(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v4 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.succeeded, s.cancelled,
           s.oldest_age_seconds, s.paused,
           CASE WHEN s.paused THEN
                    CASE WHEN s.ready > 0 THEN jsonb_build_object('paused', s.ready)
                         ELSE '{}'::jsonb END
                WHEN s.ready = 0 THEN '{}'::jsonb
                ELSE coalesce((
                    SELECT jsonb_object_agg(h.held_by, h.n)
                      FROM (SELECT x.held_by, count(*) AS n
                              FROM drainpipe.queue_flow f
                             CROSS JOIN LATERAL drainpipe.job_flow_held(f, NULL, clock_timestamp()) x
                             WHERE f.queue = s.queue
                             GROUP BY x.held_by) h), '{}'::jsonb)
           END
      FROM (SELECT c.*, EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = c.queue) AS paused
              FROM drainpipe.job_queue_stats_v2(p_queues) c) s $function$;

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
