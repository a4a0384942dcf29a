-- The table: a claim past held keys stays flat (issue 38). The per-key pick of jobs 0015
-- (and jobs 0017's along priority levels) read a chunk of candidates, filtered it in a
-- second statement (a count of leased jobs per distinct key, a window, a sort, a hash),
-- locked the rows it chose in a third, and the turn read their states in a fourth. Here one
-- statement does a pass: it reads the candidates in claim order, probes each one's key
-- (at most key_concurrency entries of the leased index, not a count), locks the first ones
-- that fit as it goes and stops when it has enough; the turn gets their states with them.
-- Both picks are one function now (job_messages_flow_take); the turn is jobs 0017's otherwise. The index of a key's
-- live jobs in enqueue order is built once a queue is ordered, not with any first limits:
-- every write of the table adds an entry to it.

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- what is leased, per queue and key: concurrency and key_concurrency count here
    -- (bounded by the limits: only leased rows are in it)
    CREATE INDEX IF NOT EXISTS job_messages_flow_leased_idx
        ON drainpipe.job_messages (queue, drainpipe.job_key(payload), visible_at)
        WHERE state = 'leased';
    -- the live jobs of a key in enqueue order: ordered=True probes for an earlier one
    -- (ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
            WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
    END IF;
END
$$;

DROP FUNCTION IF EXISTS drainpipe.job_messages_flow_pick(drainpipe.queue_flow, integer, timestamptz);
DROP FUNCTION IF EXISTS drainpipe.job_messages_flow_priority_pick(
    drainpipe.queue_flow, integer, timestamptz, integer[]);

-- The ids (locked, in claim order) of at most p_batch ready jobs of p_flow's queue that its
-- limits allow at p_now, the held ones skipped, along the priority levels p_levels (highest
-- first; NULL: a queue without priorities, read along job_messages_live_idx as the unlimited
-- claim reads it), and whether any of them is a lapsed lease. The caller holds nothing; this
-- takes the queue's flow lock (10_flow.sql of jobs 0015) until its transaction ends.
--
-- A pass reads at most v_chunk candidates after the last place read, in order, and keeps
-- those whose key has room: its leased jobs (a probe of the leased index that stops at
-- key_concurrency entries), its claims in the key_rate window (likewise, at key_rate's
-- count), and the jobs of the key this claim already took; ordered=True keeps only a key's
-- first live job. It locks each kept row as it reaches it (skipping rows another
-- transaction holds), and stops at the claim's room. So a claim of 10 where half the keys
-- are held reads about 20 rows and probes as many keys. Two jobs of one key in one pass
-- are both kept by the probe (neither is leased yet): the pass's rows over a key's limit
-- are dropped after it (their lock lasts until the transaction ends, as the unlimited
-- pick's does for rows it reads and does not take) and the next pass goes on after them.
-- A pass that comes back short has read its whole chunk: the next one starts after the
-- chunk, four times larger. At most p_batch * 50 + 500 candidates are read: a claim
-- behind that many held jobs returns what it found (possibly nothing), and a later claim,
-- after some finish, takes them.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_take(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz, p_levels integer[],
    OUT ids bigint[], OUT lapsed boolean
)
-- runs under the settings of complete_and_claim_jobs_v1, its only caller (generic plans,
-- no seqscans; a SET clause costs every call a save and restore)
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue text := p_flow.queue;
    v_room integer;
    v_limit integer;
    v_keys text[] := '{}';
    v_chunk integer;
    v_scanned integer := 0;
    v_bound integer := p_batch * 50 + 500;
    v_level integer := p_levels[1];  -- NULL: no priorities
    v_after_at timestamptz := '-infinity';
    v_after_id bigint := 0;
    v_rows integer;
    v_r record;
    v_taken bigint;
    v_last_at timestamptz;
    v_last_id bigint;
BEGIN
    ids := '{}';
    lapsed := false;
    IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
        -- no queue-wide limit: the whole batch, under flow_gate's exclusive lock (taken
        -- here without its calls)
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(v_queue));
        v_room := p_batch;
    ELSE
        v_room := drainpipe.job_messages_flow_room(p_flow, p_batch, p_now);
    END IF;
    v_chunk := least(2 * v_room + 8, v_bound);
    WHILE v_room > 0 LOOP
        v_limit := v_room;
        v_rows := 0;
        IF v_level IS NULL THEN
            FOR v_r IN
            SELECT c.id, c.visible_at, c.k, c.leased, c.claimed, c.picked, y.state
              FROM (
                  -- each candidate's probes, once (OFFSET 0: not flattened into
                  -- the filter and the output, which would probe twice)
                  SELECT c0.*,
                         CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.job_messages l
                                  WHERE l.queue = v_queue AND drainpipe.job_key(l.payload) = c0.k
                                    AND l.state = 'leased' AND l.visible_at > p_now
                                  LIMIT p_flow.key_concurrency) s) END AS leased,
                         CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.flow_claims r
                                  WHERE r.queue = v_queue AND r.key = c0.k
                                    AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                  LIMIT p_flow.key_rate_count) s) END AS claimed,
                         CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                             SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                    FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                            FROM drainpipe.job_messages x
                           WHERE x.queue = v_queue AND x.finished_at IS NULL
                             AND x.visible_at <= p_now AND x.attempts < x.max_attempts
                             AND (x.visible_at, x.id) > (v_after_at, v_after_id)
                           ORDER BY x.visible_at, x.id
                           LIMIT v_chunk) c0
                  OFFSET 0) c
             -- the lock, row by row as candidates fit: a row another transaction
             -- holds is skipped, and one changed since is read as it is now
             CROSS JOIN LATERAL (
                  SELECT z.state FROM drainpipe.job_messages z
                   WHERE z.id = c.id AND z.finished_at IS NULL AND z.visible_at <= p_now
                     AND z.attempts < z.max_attempts
                     FOR UPDATE SKIP LOCKED) y
             WHERE c.k IS NULL
                OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                    AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                    -- ordered: only the first live job of its key (by id), one per claim
                    AND (NOT p_flow.ordered
                         OR (c.picked = 0 AND NOT EXISTS (
                                SELECT 1 FROM drainpipe.job_messages e
                                 WHERE e.queue = v_queue AND drainpipe.job_key(e.payload) = c.k
                                   AND e.finished_at IS NULL AND e.id < c.id
                                   AND drainpipe.job_key(e.payload) IS NOT NULL))))
             LIMIT v_limit
            LOOP
                v_rows := v_rows + 1;
                v_last_at := v_r.visible_at;
                v_last_id := v_r.id;
                IF v_r.k = ANY (v_keys) THEN
                    -- a key this claim took already, in this pass too: counted exactly
                    v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                    CONTINUE WHEN p_flow.ordered
                        OR (p_flow.key_concurrency IS NOT NULL
                            AND v_r.leased + v_taken >= p_flow.key_concurrency)
                        OR (p_flow.key_rate_count IS NOT NULL
                            AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                END IF;
                ids := ids || v_r.id;
                v_keys := v_keys || v_r.k;
                lapsed := lapsed OR v_r.state = 'leased';
                v_room := v_room - 1;
            END LOOP;
        ELSE
            -- the same pass along the level's range of job_messages_priority_idx (jobs 0017)
            FOR v_r IN
            SELECT c.id, c.visible_at, c.k, c.leased, c.claimed, c.picked, y.state
              FROM (
                  SELECT c0.*,
                         CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.job_messages l
                                  WHERE l.queue = v_queue AND drainpipe.job_key(l.payload) = c0.k
                                    AND l.state = 'leased' AND l.visible_at > p_now
                                  LIMIT p_flow.key_concurrency) s) END AS leased,
                         CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.flow_claims r
                                  WHERE r.queue = v_queue AND r.key = c0.k
                                    AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                  LIMIT p_flow.key_rate_count) s) END AS claimed,
                         CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                             SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                    FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                            FROM drainpipe.job_messages x
                           -- the level's range after the last place read, as row
                           -- comparisons: only the priority index serves them
                           WHERE x.queue = v_queue
                             AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                                     > (v_level, v_after_at, v_after_id)
                             AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                             AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                           ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                           LIMIT v_chunk) c0
                  OFFSET 0) c
             CROSS JOIN LATERAL (
                  SELECT z.state FROM drainpipe.job_messages z
                   WHERE z.id = c.id AND z.finished_at IS NULL AND z.visible_at <= p_now
                     AND z.attempts < z.max_attempts
                     FOR UPDATE SKIP LOCKED) y
             WHERE c.k IS NULL
                OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                    AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                    AND (NOT p_flow.ordered
                         OR (c.picked = 0 AND NOT EXISTS (
                                SELECT 1 FROM drainpipe.job_messages e
                                 WHERE e.queue = v_queue AND drainpipe.job_key(e.payload) = c.k
                                   AND e.finished_at IS NULL AND e.id < c.id
                                   AND drainpipe.job_key(e.payload) IS NOT NULL))))
             LIMIT v_limit
            LOOP
                v_rows := v_rows + 1;
                v_last_at := v_r.visible_at;
                v_last_id := v_r.id;
                IF v_r.k = ANY (v_keys) THEN
                    -- a key this claim took already, in this pass too: counted exactly
                    v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                    CONTINUE WHEN p_flow.ordered
                        OR (p_flow.key_concurrency IS NOT NULL
                            AND v_r.leased + v_taken >= p_flow.key_concurrency)
                        OR (p_flow.key_rate_count IS NOT NULL
                            AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                END IF;
                ids := ids || v_r.id;
                v_keys := v_keys || v_r.k;
                lapsed := lapsed OR v_r.state = 'leased';
                v_room := v_room - 1;
            END LOOP;
        END IF;
        EXIT WHEN v_room = 0;
        v_scanned := v_scanned + v_chunk;
        IF v_rows = v_limit THEN
            -- a full pass with rows over their key's limit: on after the last it returned
            v_after_at := v_last_at;
            v_after_id := v_last_id;
        ELSE
            -- a short pass read its whole chunk: where did the chunk end?
            v_last_at := NULL;
            IF v_level IS NULL THEN
                SELECT x.visible_at, x.id INTO v_last_at, v_last_id
                  FROM drainpipe.job_messages x
                 WHERE x.queue = v_queue AND x.finished_at IS NULL
                   AND x.visible_at <= p_now AND x.attempts < x.max_attempts
                   AND (x.visible_at, x.id) > (v_after_at, v_after_id)
                 ORDER BY x.visible_at, x.id
                OFFSET v_chunk - 1 LIMIT 1;
            ELSE
                SELECT x.visible_at, x.id INTO v_last_at, v_last_id
                  FROM drainpipe.job_messages x
                 WHERE x.queue = v_queue
                   AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                           > (v_level, v_after_at, v_after_id)
                   AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                   AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                 ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                OFFSET v_chunk - 1 LIMIT 1;
            END IF;
            IF v_last_at IS NULL THEN
                -- the chunk held every candidate left: the next level from its start, if any
                EXIT WHEN v_level IS NULL OR v_level = p_levels[cardinality(p_levels)];
                v_level := p_levels[array_position(p_levels, v_level) + 1];
                v_after_at := '-infinity';
                v_after_id := 0;
            ELSE
                v_after_at := v_last_at;
                v_after_id := v_last_id;
                v_chunk := v_chunk * 4;
            END IF;
        END IF;
        EXIT WHEN v_scanned >= v_bound;
        v_chunk := least(v_chunk, v_bound - v_scanned);
    END LOOP;
END
$$;

-- -- the turn: jobs 0017's, with the pick above for a queue with per-key limits ------------

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
        -- queue-wide limits only: the pick below, no larger than the room they leave
        v_batch := drainpipe.job_messages_flow_room(v_flow, v_batch, v_now);
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
END
$$;
