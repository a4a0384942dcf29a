-- jobs 0002: the table's leased index carries each job's key only when some queue has a
-- key_concurrency. A queue-wide concurrency counts a queue's leased jobs by visible_at
-- alone, so it no longer makes every claimed job of every queue evaluate job_key(payload)
-- for an index entry (pgmq's narrow (vt) index, jobs 0022, on the table).

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- what is leased, per queue (concurrency) or per queue and key (key_concurrency), bounded
    -- by the limits: only leased rows are in it. The index is table-wide, so every queue's
    -- claims pay for its entries: the key's only when a key limit reads it. The keyed one also
    -- serves the queue-wide counts, and is never dropped here: a key limit committed beside
    -- a concurrency-only queue's ensure must still find it afterwards.
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.key_concurrency IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), visible_at)
            WHERE state = 'leased';
        DROP INDEX IF EXISTS drainpipe.job_messages_flow_leased_queue_idx;
    ELSIF to_regclass('drainpipe.job_messages_flow_leased_idx') IS NULL THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_queue_idx
            ON drainpipe.job_messages (queue, visible_at)
            WHERE state = 'leased';
    END IF;
    -- the live jobs of a key in enqueue order: ordered=True probes for an earlier one
    -- (ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
            WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
    END IF;
END $function$;

-- An install whose queues have no key limit (any more) trades the keyed index for the
-- narrow one once: building it reads the table under a SHARE lock, as ensure_policies()
-- would. Re-runnable: a second run finds the keyed index gone.
DO $$
BEGIN
    IF to_regclass('drainpipe.job_messages_flow_leased_idx') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.key_concurrency IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_queue_idx
            ON drainpipe.job_messages (queue, visible_at)
            WHERE state = 'leased';
        DROP INDEX drainpipe.job_messages_flow_leased_idx;
    END IF;
END $$;

-- The lease bound on the table: complete_and_claim_jobs_v1 (every claim) and
-- extend_job_leases_v1 (heartbeats) refuse a lease longer than the queue's max_lease
-- (DPQ03) themselves, so drainpipe.job_messages carries no BEFORE UPDATE row trigger: it
-- fetched and locked each row that any UPDATE of the table wrote, a claimed and a completed
-- job each, before its WHEN clause could say no. Measured on a synthetic claim-and-complete
-- of 20,000 rows in turns of 10: ~3 us a job.

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
    v_max double precision;  -- the queue's max_lease, when it has a policy (jobs 0002)
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
    -- a lease longer than the queue's max_lease is refused here, once a claim, where the
    -- trigger this replaces (jobs 0002) fetched and locked every updated row again
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = p_queue;
    IF v_until > v_now + make_interval(secs => v_max + 1) THEN
        RAISE EXCEPTION 'a lease of % s is longer than queue "%"''s max_lease of % s',
            round(extract(epoch FROM v_until - v_now)::numeric, 3), p_queue, v_max
            USING ERRCODE = 'DPQ03';
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

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    c_leased constant text := 'leased';
    v_until timestamptz := coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(p_lease, 0));
    v_max double precision;
    v_over interval;
BEGIN
    -- a heartbeat's lease is measured from now (from the attempt's start if that is later):
    -- the rows are read only when the lease may be too long (jobs 0002, no trigger)
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = p_queue;
    IF v_until > clock_timestamp() + make_interval(secs => v_max + 1) THEN
        SELECT max(v_until - greatest(clock_timestamp(), m.started_at)) INTO v_over
          FROM drainpipe.job_messages m
          JOIN unnest(p_ids, p_attempts) AS f(id, attempt) ON m.id = f.id
         WHERE m.queue = p_queue AND m.attempts = f.attempt AND m.state = c_leased
           AND m.visible_at < v_until;
        IF v_over > make_interval(secs => v_max + 1) THEN
            RAISE EXCEPTION 'a lease of % s is longer than queue "%"''s max_lease of % s',
                round(extract(epoch FROM v_over)::numeric, 3), p_queue, v_max
                USING ERRCODE = 'DPQ03';
        END IF;
    END IF;
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET visible_at = v_until
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt AND m.state = c_leased
    RETURNING m.id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_trigger()
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- the claim and the heartbeat check max_lease themselves (jobs 0002), the only writers
    -- of a lease (the table grants nothing): a row trigger would fetch and lock every row
    -- every UPDATE of the table writes, completions included. An older install's goes
    -- (looked up first: a DROP locks the table exclusively even when there is none).
    IF EXISTS (SELECT 1 FROM pg_trigger t
                WHERE t.tgrelid = 'drainpipe.job_messages'::regclass
                  AND t.tgname = 'job_messages_policy_lease') THEN
        DROP TRIGGER job_messages_policy_lease ON drainpipe.job_messages;
    END IF;
END $function$;

SELECT drainpipe.ensure_lease_trigger();
