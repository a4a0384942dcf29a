-- The table: the turn of jobs 0012 (and so claim_jobs_v1, which is the turn with nothing to
-- complete) picks from this connection's bound for the queue (10_claim_bound.sql): one more
-- condition on job_messages_live_idx (visible_at >= v_from), and the pick's oldest
-- visibility time kept as the next bound. A pick that comes up short above the bound runs
-- once more from the index's start; the rows the first one locked and the second does not
-- take stay untouched and are free again at commit. Signature, rows and every other
-- statement are 0012's.
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
-- generic plan, no seqscans: see 0002 (the plan must not depend on the table's size)
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_done bigint[];
    v_now timestamptz;
    v_until timestamptz;
    v_batch integer := greatest(p_batch, 1);
    v_ids bigint[];
    v_lapsed boolean;
    v_from timestamptz := '-infinity';  -- the bound (jobs 0014)
    v_first timestamptz;
BEGIN
    -- the completions first: a claim must not take back a job this turn completes
    IF cardinality(p_ids) > 0 THEN
        PERFORM drainpipe.assert_turn_arrays(p_ids, p_attempts);
        v_done := ARRAY(SELECT drainpipe.complete_jobs_v1(p_queue, p_ids, p_attempts, p_now));
        IF cardinality(v_done) < cardinality(p_ids) THEN
            RETURN QUERY SELECT * FROM drainpipe.refused_turn_rows(p_ids, p_attempts, v_done);
        END IF;
    END IF;

    IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = p_queue) THEN
        RETURN;  -- paused: the completions above stand, nothing is claimed (jobs 0012)
    END IF;

    -- the claim's clock starts after the completions (as a claim sent after them would)
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + make_interval(secs => greatest(p_lease, 0));
    -- A job whose lease ran out on its last attempt is dead: its attempt expired.
    IF EXISTS (SELECT 1 FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NULL
                  AND x.attempts >= x.max_attempts AND x.visible_at <= v_now) THEN
        WITH swept AS (
            UPDATE drainpipe.job_messages m
               SET state = 'dead', finished_at = m.visible_at, last_code = 'MAX_ATTEMPTS',
                   last_error = 'The lease ran out on the last attempt'
             WHERE m.id = ANY (ARRAY(
                   SELECT x.id FROM drainpipe.job_messages x
                    WHERE x.queue = p_queue AND x.finished_at IS NULL
                      AND x.attempts >= x.max_attempts AND x.visible_at <= v_now
                    FOR UPDATE SKIP LOCKED))
            RETURNING m.queue, m.id, m.attempts, m.started_at, m.visible_at
        )
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        SELECT s.queue, s.id, s.attempts, s.started_at, s.visible_at, 'expired', 'LEASE_EXPIRED'
          FROM swept s
        ON CONFLICT DO NOTHING;
    END IF;

    -- The pick is a statement of its own, into arrays: the take-over record below is then a
    -- branch taken only when a lapsed lease was picked (see jobs 0004).
    IF p_now IS NULL THEN
        v_from := drainpipe.claim_bound(p_queue, v_now);
    END IF;
    LOOP
        SELECT array_agg(p.id), bool_or(p.state = 'leased'), min(p.visible_at)
          INTO v_ids, v_lapsed, v_first
          FROM (
              -- oldest visible first; rows another worker is claiming right now are skipped
              SELECT x.id, x.state, x.visible_at
                FROM drainpipe.job_messages x
               WHERE x.queue = p_queue AND x.finished_at IS NULL AND x.visible_at <= v_now
                 AND x.attempts < x.max_attempts
                 AND x.visible_at >= v_from  -- the bound: entries below are not visited
               ORDER BY x.visible_at, x.id
               LIMIT v_batch
                 FOR UPDATE SKIP LOCKED
          ) p;
        EXIT WHEN v_from = '-infinity' OR coalesce(cardinality(v_ids), 0) >= v_batch;
        v_from := '-infinity';  -- short above the bound: once more from the start
    END LOOP;
    PERFORM drainpipe.keep_claim_bound(p_queue, v_first, p_now);
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_lapsed THEN
        -- a lease that ran out: that attempt expired, and this claim takes the job over
        -- (the rows are locked by the pick, so they still read as they were picked)
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        SELECT p_queue, x.id, x.attempts, x.started_at, x.visible_at, 'expired', 'LEASE_EXPIRED'
          FROM drainpipe.job_messages x
         WHERE x.id = ANY (v_ids) AND x.state = 'leased'
        ON CONFLICT DO NOTHING;
    END IF;

    RETURN QUERY
    UPDATE drainpipe.job_messages j
       SET attempts = j.attempts + 1,
           visible_at = v_until,
           started_at = v_now,
           state = 'leased'
     -- = ANY (array): primary-key lookups even under a generic plan
     WHERE j.id = ANY (v_ids)
    RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.payload, j.max_attempts,
              j.last_error, false;
END
$$;
