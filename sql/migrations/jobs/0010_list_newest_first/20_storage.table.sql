-- list_jobs_v2: newest first by enqueued_at, then id (docs/reference.md, job records).
-- list_jobs_v1 walked the primary key (id descending), which is not the order jobs were
-- enqueued in when transactions overlap. v1 stays as it was for the previous release.
--
-- The page walks this index backwards and stops after the page (tests/admin/test_list_plan.py).
-- A plain CREATE INDEX: writes to job_messages wait while it reads the table (build it
-- CONCURRENTLY by hand first on a large table; the migration then finds it).
CREATE INDEX IF NOT EXISTS job_messages_enqueued_idx ON drainpipe.job_messages (enqueued_at, id);

-- job_records_at (0004/0005) in the new order, with the cursor (p_before_at, p_before_id):
-- rows strictly after it in (enqueued_at desc, id desc). Planned per call (plpgsql under
-- force_custom_plan), so absent filters leave the index walk alone.
CREATE OR REPLACE FUNCTION drainpipe.job_records_newest(
    p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamptz,
    p_before_id bigint, p_now timestamptz
)
RETURNS TABLE (id bigint, queue text, state text, attempts integer, max_attempts integer,
               tenant text, dedupe_key text, enqueued_at timestamptz, eligible_at timestamptz,
               started_at timestamptz, finished_at timestamptz, last_code text,
               parent_id bigint, replayed_by bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode TO 'force_custom_plan'
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, s.tenant, s.dedupe_key,
           s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           CASE WHEN s.read_state = s.state THEN s.last_code
                WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS'
                ELSE 'LEASE_EXPIRED' END,
           s.parent_id, s.replayed_by
      FROM (
          SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                 m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                 m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                 drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS read_state
            FROM drainpipe.job_messages m
           WHERE (p_queue IS NULL OR m.queue = p_queue)
             AND (p_before_at IS NULL OR (m.enqueued_at, m.id) < (p_before_at, coalesce(p_before_id, 0)))
             AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
             -- a stored state that can read as the one asked for
             AND (p_state IS NULL OR m.state = p_state
                  OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
           ORDER BY m.enqueued_at DESC, m.id DESC
      ) s
     WHERE p_state IS NULL OR s.read_state = p_state
     LIMIT greatest(coalesce(p_limit, 100), 1);
END
$$;

-- Newest first: enqueued_at descending, then id (ids are unique across queues here, so the
-- queue never decides); rows after the cursor (p_before_at, p_before_id, p_before_queue).
CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v2(
    p_queue text DEFAULT NULL,
    p_state text DEFAULT NULL,
    p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_before_at timestamptz DEFAULT NULL,
    p_before_id bigint DEFAULT NULL,
    p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by, NULL::jsonb
      FROM drainpipe.job_records_newest(p_queue, p_state, p_tenant, p_limit, p_before_at,
                                        p_before_id, coalesce(p_now, clock_timestamp())) r;
END
$$;
