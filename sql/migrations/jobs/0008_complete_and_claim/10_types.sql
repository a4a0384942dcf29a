-- jobs 0008: a lane that finished a batch settles it and takes the next one in one call
-- (issue 21). One statement, one transaction, one commit: the completions of batch N and the
-- claim of batch N+1 commit together or not at all. The completions are complete_jobs_v1's
-- (fenced by the attempt and the lease, a cancelled attempt's late_outcome recorded) and the
-- claim is claim_jobs_v1's (sweeps, take-over records, policy triggers). On pgmq the fused
-- call calls both; on the table the claim's body moves into the fused call and
-- claim_jobs_v1 becomes the fused call with nothing to complete (one body, one plan cache).

DO $types$
BEGIN
    IF to_regtype('drainpipe.job_turn_row_v1') IS NULL THEN
        -- a claimed job (refused = false: job_row_v1's columns), or a completion the
        -- database refused (refused = true: id and attempts of the settlement, nothing else)
        CREATE TYPE drainpipe.job_turn_row_v1 AS (
            id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
            payload jsonb, max_attempts integer, last_error text, refused boolean
        );
    END IF;
END
$types$;

-- A turn's completions (complete_jobs_v1, either storage): the ones it refused, as turn rows
-- (refused = true), none in the common case. Both storages' complete_and_claim_jobs_v1 start
-- with this.
CREATE OR REPLACE FUNCTION drainpipe.complete_turn_jobs(
    p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamptz
)
RETURNS SETOF drainpipe.job_turn_row_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_done bigint[];
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
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
END
$$;
