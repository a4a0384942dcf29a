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
