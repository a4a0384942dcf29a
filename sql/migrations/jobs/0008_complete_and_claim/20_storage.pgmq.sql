-- pgmq: the queue's own generated functions do the work; this one calls
-- complete_jobs_v1 and claim_jobs_v1 in that order (the completions must not see their jobs
-- claimed again by their own turn's claim).

-- The refused completions first (none, in the common case), then the claimed jobs.
CREATE OR REPLACE FUNCTION drainpipe.complete_and_claim_jobs_v1(
    p_queue text,
    p_ids bigint[],
    p_attempts integer[],
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_turn_row_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- the completions first: a claim must not take back a job this turn completes
    IF cardinality(p_ids) > 0 THEN
        RETURN QUERY SELECT * FROM drainpipe.complete_turn_jobs(p_queue, p_ids, p_attempts, p_now);
    END IF;
    RETURN QUERY
    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
           c.last_error, false
      FROM drainpipe.claim_jobs_v1(p_queue, p_lease, p_batch, p_now) AS c;
END
$$;
