-- The table: which due jobs of a limited queue its flow limits hold, and why (10_flow.sql
-- of jobs 0015). A due job is one a claim could take now but for the limits: live, not
-- leased, eligible (its delay or retry wait over) and with attempts left -- queued, or
-- retry_wait once its wait is over: what job_queue_stats counts as ready.
--
-- One pass over the due jobs (all of them, or p_ids), then per distinct key one probe per
-- limit through the flow indexes (ensure_flow_indexes), and the queue-wide counts once:
-- the same answers as the claim's checks (job_messages_flow_room/_pick), in the order
-- held_by reports them: order, concurrency, rate.
CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(
    p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamptz
)
RETURNS TABLE (id bigint, held_by text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH due AS MATERIALIZED (
        SELECT j.id, drainpipe.job_key(j.payload) AS key
          FROM drainpipe.job_messages j
         WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
           AND j.visible_at <= p_now AND j.attempts < j.max_attempts
           AND (p_ids IS NULL OR j.id = ANY (p_ids))
    ),
    whole AS (
        SELECT CASE WHEN p_flow.concurrency IS NOT NULL THEN (
                   SELECT count(*) FROM drainpipe.job_messages l
                    WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now)
               END AS leased,
               CASE WHEN p_flow.rate_count IS NOT NULL THEN (
                   SELECT count(*) FROM drainpipe.flow_claims c
                    WHERE c.queue = p_flow.queue
                      AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per))
               END AS claims
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
                   WHEN w.leased >= p_flow.concurrency OR k.leased >= p_flow.key_concurrency
                       THEN 'concurrency'
                   WHEN w.claims >= p_flow.rate_count OR k.claims >= p_flow.key_rate_count
                       THEN 'rate'
               END AS held_by
          FROM due d CROSS JOIN whole w LEFT JOIN keys k ON k.key = d.key
    ) h
    WHERE h.held_by IS NOT NULL
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
