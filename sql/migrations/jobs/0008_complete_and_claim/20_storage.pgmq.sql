-- pgmq: each queue gets its own turn function beside its claim and complete functions
-- (jobs 0006's define_job_queue_functions_v1), calling them by name: static SQL, so their
-- plans are cached per session, and complete_and_claim_jobs_v1 pays one dynamic statement
-- a turn instead of the two a complete_jobs_v1 and a claim_jobs_v1 would cost. The
-- completions run first: a claim must not take back a job its own turn completes.

CREATE OR REPLACE FUNCTION drainpipe.define_job_turn_function_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_ids bigint[], p_attempts integer[], p_lease double precision, p_batch integer,
            p_now timestamptz
        )
        RETURNS SETOF drainpipe.job_turn_row_v1
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        DECLARE
            v_done bigint[];
        BEGIN
            IF cardinality(p_ids) > 0 THEN
                PERFORM drainpipe.assert_turn_arrays(p_ids, p_attempts);
                v_done := ARRAY(SELECT drainpipe.%2$I(p_ids, p_attempts, p_now));
                IF cardinality(v_done) < cardinality(p_ids) THEN
                    RETURN QUERY SELECT * FROM drainpipe.refused_turn_rows(p_ids, p_attempts, v_done);
                END IF;
            END IF;
            RETURN QUERY
            SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                   c.last_error, false
              FROM drainpipe.%3$I(p_lease, p_batch, p_now) AS c;
        END
        $body$
        $fn$, 'complete_and_claim_jobs__' || p_queue, 'complete_jobs__' || p_queue,
              'claim_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) FROM PUBLIC',
                   'complete_and_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) TO service_role',
                       'complete_and_claim_jobs__' || p_queue);
    END IF;
END
$define$;

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
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    -- by name only, as claim_jobs_v1 looks its queue's function up (see jobs 0002)
    IF to_regproc('drainpipe.complete_and_claim_jobs__' || p_queue) IS NULL THEN
        IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
            PERFORM drainpipe.ensure_job_queue_v1(p_queue);
        END IF;
        PERFORM drainpipe.define_job_turn_function_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3, $4, $5)',
                                'complete_and_claim_jobs__' || p_queue)
      USING p_ids, p_attempts, p_lease, p_batch, p_now;
END
$$;
