-- drainpipe's jobs, table storage: a job by id is one row of job_messages read by its key;
-- job_records_at, a filtered list that only get_job called (with the id and a limit of
-- one), goes.

SET check_function_bodies = off;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_get_job(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, NULL::timestamptz,
           drainpipe.job_tenant(s.payload), s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END, s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.read_code, s.parent_id, s.replayed_by,
           drainpipe.job_history_v1(s.queue, s.id, s.attempts, s.state, s.started_at,
                                    s.finished_at, s.visible_at, s.read_code, s.at)
      FROM (SELECT m.*, r.read_state, c.at,
                   CASE WHEN r.read_state = m.state THEN m.last_code
                        WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
              FROM drainpipe.job_messages m
             CROSS JOIN (SELECT coalesce(p_now, clock_timestamp()) AS at) c
             CROSS JOIN LATERAL (SELECT drainpipe.job_state_at(m.state, m.visible_at, m.attempts,
                                                               m.max_attempts, c.at) AS read_state) r
             WHERE m.id = p_id AND m.queue = p_queue) s $function$;

RESET check_function_bodies;

-- an internal helper nothing calls now (no client ever called it)
DROP FUNCTION IF EXISTS drainpipe.job_records_at(text, text, text, integer, bigint, bigint, timestamptz);
