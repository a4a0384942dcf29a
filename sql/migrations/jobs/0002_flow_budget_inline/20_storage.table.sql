-- jobs 0002: the table's claim spends the connection's chunk in an expression of its own
-- (flow_budget_spend, inlined), not in a call of job_messages_flow_room.

CREATE OR REPLACE FUNCTION drainpipe.complete_and_claim_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_turn_row_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    v_done bigint[];
    v_now timestamptz;
    v_until timestamptz;
    v_batch integer := greatest(p_batch, 1);
    v_ids bigint[];
    v_lapsed boolean;
    v_flow drainpipe.queue_flow;
    v_from timestamptz := '-infinity';  -- the bound (jobs 0014)
    v_first timestamptz;
    v_levels integer[];  -- the queue's priorities, when it has any (jobs 0017)
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
    -- the queue's flow limits, if it has any (jobs 0015)
    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = p_queue;
    -- and its priorities, if it ever had a job with one (jobs 0017)
    SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = p_queue;
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
    IF v_flow.key_concurrency IS NOT NULL OR v_flow.key_rate_count IS NOT NULL OR v_flow.ordered THEN
        -- limits per key: the pick they allow, along the levels of a prioritised queue,
        -- rows locked, and whether one of them is a lapsed lease (jobs 0021)
        SELECT p.ids, p.lapsed INTO v_ids, v_lapsed
          FROM drainpipe.job_messages_flow_take(v_flow, v_batch, v_now, v_levels) p;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    ELSE
    IF v_flow.queue IS NOT NULL THEN
        -- queue-wide limits only: the pick below, no larger than the room they leave: the
        -- connection's chunk, spent by an expression inlined here (jobs 0002), else counted
        v_batch := coalesce(drainpipe.flow_budget_spend(p_queue, v_batch),
                            drainpipe.job_messages_flow_room(v_flow, v_batch, v_now));
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF v_levels IS NOT NULL THEN
        -- priorities: the pick by level, highest first (jobs 0017), rows locked
        v_ids := drainpipe.job_messages_priority_pick(p_queue, v_levels, v_batch, v_now, p_now IS NULL);
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
        SELECT bool_or(x.state = 'leased') INTO v_lapsed
          FROM drainpipe.job_messages x WHERE x.id = ANY (v_ids);
    ELSE
    -- The pick is a statement of its own, into arrays: the take-over record below is then a
    -- branch taken only when a lapsed lease was picked (see jobs 0004). It starts at this
    -- connection's bound for the queue (jobs 0014), once more from the start when short.
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
    END IF;
    END IF;
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
    IF v_flow.rate_count IS NOT NULL OR v_flow.key_rate_count IS NOT NULL THEN
        -- the rate windows count the attempts just started (jobs 0015)
        PERFORM drainpipe.flow_record_claims(v_flow,
            ARRAY(SELECT drainpipe.job_key(x.payload) FROM drainpipe.job_messages x
                   WHERE x.id = ANY (v_ids)),
            v_now);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(p_flow drainpipe.queue_flow, p_batch integer, p_now timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql AS $function$
DECLARE
    v_leased bigint := 0;
    v_room integer;
BEGIN
    -- the claim tried the connection's chunk first (flow_budget_spend, jobs 0002)
    v_room := drainpipe.flow_budget_take(p_flow, p_batch);
    IF v_room >= 0 THEN
        RETURN v_room;
    END IF;
    IF v_room IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    ELSIF drainpipe.flow_budget_pending(p_flow.queue) < 0 THEN
        RETURN 0;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_room(p_flow, p_batch, v_leased, p_now);
        IF p_flow.concurrency IS NOT NULL THEN
            PERFORM drainpipe.flow_budget_reset(p_flow, v_leased, v_room);
        END IF;
        RETURN v_room;
    END IF;
    -- the budget ran out under the shared lock: its chunks count as leased
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + drainpipe.flow_budget_pending(p_flow.queue), p_now);
END $function$;
