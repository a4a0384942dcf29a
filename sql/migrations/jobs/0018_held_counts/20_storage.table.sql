-- The table: which due jobs of a limited queue its flow limits hold, and why (10_flow.sql
-- of jobs 0015). A due job is one a claim could take now but for the limits: live, not
-- leased, eligible (its delay or retry wait over) and with attempts left -- queued, or
-- retry_wait once its wait is over: what job_queue_stats counts as ready.
--
-- Two plans, one answer: for a few jobs (p_ids, JobRecord.held_by) a probe per distinct key
-- and limit through the flow indexes (ensure_flow_indexes); for every due job (p_ids NULL,
-- the held counts) one pass per limit grouped by key (what is leased, the live jobs' first
-- ids when ordered, the key's claims in its window) joined to the due jobs, so the count
-- costs a few scans whatever the number of keys. The queue-wide counts are read once. The
-- same answers as the claim's checks (job_messages_flow_room/_pick), in the order held_by
-- reports them: order, concurrency, rate.
CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(
    p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamptz
)
RETURNS TABLE (id bigint, held_by text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- the keys are read only when a per-key limit needs them (parsing costs every row)
    v_keyed boolean := p_flow.ordered OR p_flow.key_concurrency IS NOT NULL
                       OR p_flow.key_rate_count IS NOT NULL;
    v_leased bigint;
    v_claims bigint;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF p_flow.rate_count IS NOT NULL THEN
        SELECT count(*) INTO v_claims FROM drainpipe.flow_claims c
         WHERE c.queue = p_flow.queue
           AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per);
    END IF;
    IF p_ids IS NOT NULL THEN
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id, CASE WHEN v_keyed THEN drainpipe.job_key(j.payload) END AS key
              FROM drainpipe.job_messages j
             WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
               AND j.visible_at <= p_now AND j.attempts < j.max_attempts
               AND j.id = ANY (p_ids)
        ),
        keys AS (
            SELECT k.key,
                   CASE WHEN p_flow.ordered THEN (
                       SELECT min(e.id) FROM drainpipe.job_messages e
                        WHERE e.queue = p_flow.queue AND drainpipe.job_key(e.payload) = k.key
                          AND drainpipe.job_key(e.payload) IS NOT NULL AND e.finished_at IS NULL)
                   END AS first_id,
                   CASE WHEN p_flow.key_concurrency IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.job_messages l
                        WHERE l.queue = p_flow.queue AND drainpipe.job_key(l.payload) = k.key
                          AND l.state = 'leased' AND l.visible_at > p_now)
                   END AS leased,
                   CASE WHEN p_flow.key_rate_count IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.flow_claims c
                        WHERE c.queue = p_flow.queue AND c.key = k.key
                          AND c.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per))
                   END AS claims
              FROM (SELECT DISTINCT d.key FROM due d WHERE d.key IS NOT NULL) k
        )
        SELECT h.id, h.held_by FROM (
            SELECT d.id, CASE
                       WHEN k.first_id < d.id THEN 'order'
                       WHEN v_leased >= p_flow.concurrency OR k.leased >= p_flow.key_concurrency
                           THEN 'concurrency'
                       WHEN v_claims >= p_flow.rate_count OR k.claims >= p_flow.key_rate_count
                           THEN 'rate'
                   END AS held_by
              FROM due d LEFT JOIN keys k ON k.key = d.key
        ) h
        WHERE h.held_by IS NOT NULL;
        RETURN;
    END IF;
    RETURN QUERY
    -- materialized: each job's key is parsed once, not once per join
    WITH due AS MATERIALIZED (
        SELECT j.id, CASE WHEN v_keyed THEN drainpipe.job_key(j.payload) END AS key
          FROM drainpipe.job_messages j
         WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
           AND j.visible_at <= p_now AND j.attempts < j.max_attempts
    ),
    firsts AS (
        SELECT drainpipe.job_key(e.payload) AS key, min(e.id) AS first_id
          FROM drainpipe.job_messages e
         WHERE p_flow.ordered AND e.queue = p_flow.queue AND e.finished_at IS NULL
           AND drainpipe.job_key(e.payload) IS NOT NULL
         GROUP BY 1
    ),
    leased AS (
        SELECT drainpipe.job_key(l.payload) AS key, count(*) AS n
          FROM drainpipe.job_messages l
         WHERE p_flow.key_concurrency IS NOT NULL AND l.queue = p_flow.queue
           AND l.state = 'leased' AND l.visible_at > p_now
         GROUP BY 1
    ),
    claims AS (
        SELECT c.key, count(*) AS n
          FROM drainpipe.flow_claims c
         WHERE p_flow.key_rate_count IS NOT NULL AND c.queue = p_flow.queue
           AND c.key IS NOT NULL
           AND c.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
         GROUP BY 1
    )
    SELECT h.id, h.held_by FROM (
        SELECT d.id, CASE
                   WHEN f.first_id < d.id THEN 'order'
                   WHEN v_leased >= p_flow.concurrency OR l.n >= p_flow.key_concurrency
                       THEN 'concurrency'
                   WHEN v_claims >= p_flow.rate_count OR c.n >= p_flow.key_rate_count
                       THEN 'rate'
               END AS held_by
          FROM due d
          LEFT JOIN firsts f ON f.key = d.key
          LEFT JOIN leased l ON l.key = d.key
          LEFT JOIN claims c ON c.key = d.key
    ) h
    WHERE h.held_by IS NOT NULL;
END
$$;

-- How many jobs of p_queue are due at p_now (job_flow_held's "due"; job_queue_stats' ready):
-- the held count of a paused queue in job_queue_holds_v1. Through the claim's own range.
CREATE OR REPLACE FUNCTION drainpipe.job_queue_due(p_queue text, p_now timestamptz)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*) FROM drainpipe.job_messages j
     WHERE j.queue = p_queue AND j.finished_at IS NULL
       AND j.visible_at <= p_now AND j.attempts < j.max_attempts
$$;
