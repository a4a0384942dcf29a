-- pgmq: the console's search and the bulk actions' matching (see the table's part for the
-- contract), newest first by (id, queue) like list_jobs_v1: each queue's live and archived
-- rows, filtered and cut to the page inside each part, then merged.

-- One queue's part as SQL text, with $1 state, $2 tenant, $3 before id, $4 before queue,
-- $5 now, $6 limit, $7 id, $8 dedupe key, $9 since, $10 until, $11 code.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_search_sql(p_queue text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format($sql$
        (SELECT * FROM (
            SELECT r.*, CASE WHEN r.read_state = r.stored_state THEN r.stored_code
                             WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
              FROM (
                SELECT m.msg_id AS id, %1$L::text AS queue,
                       drainpipe.pgmq_live_state(m.read_ct, m.message) AS stored_state,
                       drainpipe.job_state_at(drainpipe.pgmq_live_state(m.read_ct, m.message), m.vt, m.read_ct,
                                              coalesce((m.message ->> 'max_attempts')::integer, 5), $5) AS read_state,
                       m.read_ct AS attempts, coalesce((m.message ->> 'max_attempts')::integer, 5) AS max_attempts,
                       drainpipe.job_tenant(m.message -> 'payload') AS tenant,
                       m.message ->> 'dedupe_key' AS dedupe_key, m.enqueued_at, m.vt AS lease_end,
                       %4$s AS started_at, NULL::timestamptz AS finished_at,
                       m.message ->> 'last_code' AS stored_code, (m.message ->> 'parent_id')::bigint AS parent_id,
                       NULL::bigint AS replayed_by
                  FROM pgmq.%2$I m
                 WHERE ($7::bigint IS NULL OR m.msg_id = $7)
                   AND ($3::bigint IS NULL OR m.msg_id < $3 + CASE WHEN %1$L < $4 THEN 1 ELSE 0 END)
                   AND ($8::text IS NULL OR m.message ->> 'dedupe_key' = $8)
                   AND ($9::timestamptz IS NULL OR m.enqueued_at >= $9)
                   AND ($10::timestamptz IS NULL OR m.enqueued_at < $10)
                   AND ($2::text IS NULL OR drainpipe.job_tenant(m.message -> 'payload') = $2)
                 ORDER BY m.msg_id DESC) r) l
          WHERE ($1::text IS NULL OR l.read_state = $1)
            AND ($11::text IS NULL OR l.read_code = $11
                 OR (l.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                     AND drainpipe.job_cause(%1$L, l.id) = $11))
          LIMIT $6)
        UNION ALL
        (SELECT * FROM (
            SELECT a.msg_id AS id, %1$L::text AS queue,
                   CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                        WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS stored_state,
                   CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                        WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS read_state,
                   a.read_ct AS attempts, coalesce((a.message ->> 'max_attempts')::integer, 5) AS max_attempts,
                   drainpipe.job_tenant(a.message -> 'payload') AS tenant,
                   a.message ->> 'dedupe_key' AS dedupe_key, a.enqueued_at, a.vt AS lease_end, %5$s AS started_at,
                   a.archived_at AS finished_at,
                   CASE WHEN a.message ? 'cancelled' OR a.message ? 'dead' THEN a.message ->> 'last_code'
                        ELSE a.message ->> 'skipped' END AS stored_code,
                   (a.message ->> 'parent_id')::bigint AS parent_id,
                   (a.message ->> 'replayed_by')::bigint AS replayed_by,
                   CASE WHEN a.message ? 'cancelled' OR a.message ? 'dead' THEN a.message ->> 'last_code'
                        ELSE a.message ->> 'skipped' END AS read_code
              FROM pgmq.%3$I a
             WHERE ($7::bigint IS NULL OR a.msg_id = $7)
               AND ($3::bigint IS NULL OR a.msg_id < $3 + CASE WHEN %1$L < $4 THEN 1 ELSE 0 END)
               AND ($8::text IS NULL OR a.message ->> 'dedupe_key' = $8)
               AND ($9::timestamptz IS NULL OR a.enqueued_at >= $9)
               AND ($10::timestamptz IS NULL OR a.enqueued_at < $10)
               AND ($2::text IS NULL OR drainpipe.job_tenant(a.message -> 'payload') = $2)
               AND ($1::text IS NULL OR $1 = CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                                                  WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END)
             ORDER BY a.msg_id DESC) t
          WHERE ($11::text IS NULL OR t.read_code = $11
                 OR (t.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                     AND drainpipe.job_cause(%1$L, t.id) = $11))
          LIMIT $6)
    $sql$, p_queue, 'q_' || p_queue, 'a_' || p_queue,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'm.last_read_at' ELSE 'NULL::timestamptz' END,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'a.last_read_at' ELSE 'NULL::timestamptz' END)
$$;

CREATE OR REPLACE FUNCTION drainpipe.search_jobs_v1(
    p_queue text, p_state text, p_tenant text, p_code text, p_since timestamptz,
    p_until timestamptz, p_dedupe_key text, p_id bigint, p_limit integer,
    p_before_id bigint DEFAULT NULL, p_before_queue text DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parts text;
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    SELECT string_agg(drainpipe.pgmq_search_sql(m.queue_name), ' UNION ALL ')
      INTO v_parts
      FROM pgmq.meta m
     WHERE m.queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'
       AND (p_queue IS NULL OR m.queue_name = p_queue)
       AND to_regclass('pgmq.a_' || m.queue_name) IS NOT NULL;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        SELECT r.id, r.queue, r.read_state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
               r.dedupe_key, r.enqueued_at,
               CASE WHEN r.read_state IN ('queued', 'retry_wait') THEN r.lease_end END,
               r.started_at,
               CASE WHEN r.read_state = 'dead' AND r.finished_at IS NULL THEN r.lease_end ELSE r.finished_at END,
               r.read_code, r.parent_id, r.replayed_by, NULL::jsonb
          FROM (%s) r
         ORDER BY r.id DESC, r.queue DESC
         LIMIT $6
    $sql$, v_parts)
      USING p_state, p_tenant, p_before_id, coalesce(p_before_queue, ''),
            coalesce(p_now, clock_timestamp()), greatest(coalesce(p_limit, 100), 1), p_id,
            p_dedupe_key, p_since, p_until, p_code;
END
$$;
