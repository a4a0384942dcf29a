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

-- The completions of a turn that complete_jobs_v1 (or a pgmq queue's own complete function)
-- refused, as turn rows (refused = true): the ids of p_ids not in p_done. Called only when
-- fewer were done than asked (a lost or cancelled lease), so the common turn never runs it.
CREATE OR REPLACE FUNCTION drainpipe.refused_turn_rows(
    p_ids bigint[], p_attempts integer[], p_done bigint[]
)
RETURNS SETOF drainpipe.job_turn_row_v1
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f.id, f.attempt, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
           NULL::integer, NULL::text, true
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE f.id <> ALL (coalesce(p_done, '{}'::bigint[]))
$$;

-- p_ids and p_attempts pair up (a turn's own check, before anything is completed).
CREATE OR REPLACE FUNCTION drainpipe.assert_turn_arrays(p_ids bigint[], p_attempts integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) IS DISTINCT FROM coalesce(cardinality(p_attempts), 0) THEN
        RAISE EXCEPTION 'complete_and_claim_jobs_v1: % ids but % attempts',
            coalesce(cardinality(p_ids), 0), coalesce(cardinality(p_attempts), 0)
            USING ERRCODE = '22023';
    END IF;
END
$$;
