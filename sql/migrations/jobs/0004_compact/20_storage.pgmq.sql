-- drainpipe's jobs, pgmq storage: a job by id reads its queue's rows through the same SQL
-- builder as the list (pgmq_records_ids_sql, the id as a range of one), so the builder
-- that only get_job used, and its runner, go.

SET check_function_bodies = off;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_get_job(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = p_queue)
       OR to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        SELECT r.id, r.queue, r.read_state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
               r.dedupe_key, r.enqueued_at,
               CASE WHEN r.read_state IN ('queued', 'retry_wait') THEN r.lease_end END,
               r.started_at,
               CASE WHEN r.read_state = 'dead' AND r.finished_at IS NULL THEN r.lease_end ELSE r.finished_at END,
               CASE WHEN r.read_state = r.stored_state THEN r.last_code
                    WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END,
               r.parent_id, r.replayed_by,
               drainpipe.job_history_v1(r.queue, r.id, r.attempts, r.stored_state, r.started_at,
                   r.finished_at, r.lease_end, r.last_code, $6)
          FROM (SELECT u.*, drainpipe.job_state_at(u.stored_state, u.lease_end, u.attempts,
                                                   u.max_attempts, $6) AS read_state
                  FROM (%s) u) r
         LIMIT 1
    $sql$, drainpipe.pgmq_records_ids_sql(p_queue, p_id, p_id))
      USING NULL::text, NULL::text, NULL::timestamptz, 0::bigint, ''::text,
            coalesce(p_now, clock_timestamp()), 1;
END $function$;

RESET check_function_bodies;

-- internal helpers nothing calls now (no client ever called them)
DROP FUNCTION IF EXISTS drainpipe.pgmq_records(text, text, text, integer, bigint, text, bigint, timestamptz, boolean);
DROP FUNCTION IF EXISTS drainpipe.pgmq_records_sql(text);
