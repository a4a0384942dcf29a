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
DECLARE
    v_done bigint[];
BEGIN
    IF cardinality(p_ids) > 0 THEN
        IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_attempts) THEN
            RAISE EXCEPTION 'complete_and_claim_jobs_v1: % ids but % attempts',
                cardinality(p_ids), cardinality(p_attempts) USING ERRCODE = '22023';
        END IF;
        SELECT array_agg(c.c) INTO v_done
          FROM drainpipe.complete_jobs_v1(p_queue, p_ids, p_attempts, p_now) AS c(c);
        IF coalesce(cardinality(v_done), 0) < cardinality(p_ids) THEN
            RETURN QUERY
            SELECT f.id, f.attempt, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
                   NULL::integer, NULL::text, true
              FROM unnest(p_ids, p_attempts) AS f(id, attempt)
             WHERE f.id <> ALL (coalesce(v_done, '{}'::bigint[]));
        END IF;
    END IF;
    RETURN QUERY
    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
           c.last_error, false
      FROM drainpipe.claim_jobs_v1(p_queue, p_lease, p_batch, p_now) AS c;
END
$$;
