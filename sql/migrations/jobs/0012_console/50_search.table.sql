-- The table: the console's search (GET /jobs with id, dedupe_key, code, since, until) and
-- the bulk actions' matching, newest first by id like list_jobs_v1. p_code matches a job's
-- last_code, or, for a job that ended MAX_ATTEMPTS or DEADLINE_PASSED, the code of its last
-- attempt (its cause of death). Planned per call (as jobs 0005 plans the list): a search
-- without a selective filter walks the primary key backwards and stops after the page.
CREATE OR REPLACE FUNCTION drainpipe.search_jobs_v1(
    p_queue text, p_state text, p_tenant text, p_code text, p_since timestamptz,
    p_until timestamptz, p_dedupe_key text, p_id bigint, p_limit integer,
    p_before_id bigint DEFAULT NULL, p_before_queue text DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, NULL::timestamptz, s.tenant,
           s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.read_code, s.parent_id, s.replayed_by, NULL::jsonb
      FROM (
          SELECT r.*,
                 CASE WHEN r.read_state = r.state THEN r.last_code
                      WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
            FROM (
                SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                       m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                       m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                       drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, v_now) AS read_state
                  FROM drainpipe.job_messages m
                 WHERE (p_id IS NULL OR m.id = p_id)
                   AND (p_queue IS NULL OR m.queue = p_queue)
                   AND (p_before_id IS NULL OR m.id < p_before_id)
                   AND (p_dedupe_key IS NULL OR m.dedupe_key = p_dedupe_key)
                   AND (p_since IS NULL OR m.enqueued_at >= p_since)
                   AND (p_until IS NULL OR m.enqueued_at < p_until)
                   AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
                   AND (p_state IS NULL OR m.state = p_state
                        OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
                 ORDER BY m.id DESC
            ) r
      ) s
     WHERE (p_state IS NULL OR s.read_state = p_state)
       AND (p_code IS NULL OR s.read_code = p_code
            OR (s.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                AND (SELECT a.code FROM drainpipe.job_attempts a
                      WHERE a.queue = s.queue AND a.job_id = s.id AND a.code IS NOT NULL
                      ORDER BY a.number DESC LIMIT 1) = p_code))
     LIMIT greatest(coalesce(p_limit, 100), 1);
END
$$;
