-- pgmq: the claim (claim_jobs_v1) and each queue's turn function (complete_and_claim_jobs__q,
-- defined by define_job_turn_function_v1) return no job while their queue is paused. The
-- turn still completes what it was given: only its claim is held. Signatures and rows are
-- those of jobs 0002 and 0008.

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_row_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = p_queue) THEN
        RETURN;  -- paused: nothing is handed out (jobs 0012)
    END IF;
    -- by name only, as release 0 did (see jobs 0002)
    IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'claim_jobs__' || p_queue)
      USING p_lease, p_batch, p_now;
END
$$;

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
            IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = %4$L) THEN
                RETURN;  -- paused: the completions above stand, nothing is claimed
            END IF;
            RETURN QUERY
            SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                   c.last_error, false
              FROM drainpipe.%3$I(p_lease, p_batch, p_now) AS c;
        END
        $body$
        $fn$, 'complete_and_claim_jobs__' || p_queue, 'complete_jobs__' || p_queue,
              'claim_jobs__' || p_queue, p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) FROM PUBLIC',
                   'complete_and_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) TO service_role',
                       'complete_and_claim_jobs__' || p_queue);
    END IF;
END
$define$;

-- Existing queues' turn functions, regenerated with the pause check.
DO $regenerate$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regproc('drainpipe.complete_and_claim_jobs__' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.define_job_turn_function_v1(v_queue);
        END IF;
    END LOOP;
END
$regenerate$;
