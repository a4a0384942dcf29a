-- The table: flow control (10_flow.sql) in the turn of jobs 0008 / 0012, and so in
-- claim_jobs_v1, the executor, PostgREST and every other claimer. The limited pick is
-- job_messages_flow_pick, a filter over the candidate rows the unlimited pick would read;
-- complete_and_claim_jobs_v1 calls it instead of its own pick when its queue has limits.
-- The unlimited pick is jobs 0014's, starting at the connection's bound (10_claim_bound.sql).

-- Built when a first queue gets limits (ensure_queue_flow_v1), so a database that uses
-- no flow control pays nothing for them on its claims. A plain CREATE INDEX: writes wait
-- while it reads the table (build them CONCURRENTLY by hand first on a large table).
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
    CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
        ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
        WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
END
$$;

-- The room a limited claim of p_batch has under the queue-wide limits (concurrency, rate),
-- after taking the queue's flow lock (flow_gate, 10_flow.sql) until the caller's
-- transaction ends.
-- What is leased is counted through job_messages_flow_leased_idx: at most the limit's rows.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
)
RETURNS integer
-- no SET clause and not a security definer: called only by the claim functions, whose
-- settings it runs under (a SET clause costs every call a save and restore)
LANGUAGE plpgsql
AS $$
DECLARE
    v_leased bigint := 0;
    v_beside integer;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    v_beside := drainpipe.flow_gate(p_flow, p_batch, v_leased);
    IF p_flow.concurrency IS NOT NULL THEN
        -- again, under the lock: what committed while this claim waited counts
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + v_beside, p_now);
END
$$;

-- The ids (locked) of at most p_batch ready jobs of p_flow's queue that its limits allow
-- at p_now, oldest eligible first, the held ones skipped. The caller holds nothing; this
-- takes the queue's flow lock (see 10_flow.sql) until the caller's transaction ends.
-- Candidates are read in chunks along the same index as the unlimited pick; each chunk is
-- filtered in one statement (a probe per distinct key), so a claim of 10 where half the
-- keys are held reads about 20 rows. At most p_batch * 50 + 500 candidates are looked at:
-- a claim behind that many held jobs returns what it found (possibly nothing), and the
-- next claim, after some finish, takes them.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_pick(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
)
RETURNS bigint[]
-- runs under the settings of complete_and_claim_jobs_v1, its only caller (generic plans,
-- no seqscans): see job_messages_flow_room
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue text := p_flow.queue;
    v_room integer;
    v_ids bigint[] := '{}';
    v_keys text[] := '{}';
    v_chunk integer;
    v_scanned integer := 0;
    v_bound integer := p_batch * 50 + 500;
    v_after_at timestamptz := '-infinity';
    v_after_id bigint := 0;
    v_rows integer;
    v_take bigint[];
    v_take_keys text[];
BEGIN
    v_room := drainpipe.job_messages_flow_room(p_flow, p_batch, p_now);
    v_chunk := 2 * v_room + 8;
    WHILE v_room > 0 AND v_scanned < v_bound LOOP
        WITH chunk AS (
            SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
              FROM drainpipe.job_messages x
             WHERE x.queue = v_queue AND x.finished_at IS NULL AND x.visible_at <= p_now
               AND x.attempts < x.max_attempts
               AND (x.visible_at, x.id) > (v_after_at, v_after_id)
             ORDER BY x.visible_at, x.id
             LIMIT v_chunk
        ), ranked AS (
            -- nth: the place of a job among this chunk's jobs of its key
            SELECT c.*, row_number() OVER (PARTITION BY c.k ORDER BY c.visible_at, c.id) AS nth,
                   (SELECT count(*) FROM unnest(v_keys) p WHERE p = c.k) AS picked
              FROM chunk c
        ), keyed AS (
            -- one probe per distinct key of the chunk, only for the limits the queue has
            SELECT d.k,
                   CASE WHEN p_flow.key_concurrency IS NULL THEN 0 ELSE (
                       SELECT count(*) FROM drainpipe.job_messages l
                        WHERE l.queue = v_queue AND drainpipe.job_key(l.payload) = d.k
                          AND l.state = 'leased' AND l.visible_at > p_now) END AS leased,
                   CASE WHEN p_flow.key_rate_count IS NULL THEN 0 ELSE (
                       SELECT count(*) FROM drainpipe.flow_claims f
                        WHERE f.queue = v_queue AND f.key = d.k
                          AND f.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)) END AS claimed
              FROM (SELECT DISTINCT c.k FROM chunk c WHERE c.k IS NOT NULL) d
        ), allowed AS (
            SELECT r.id, r.k, r.visible_at
              FROM ranked r LEFT JOIN keyed k ON k.k = r.k
             WHERE r.k IS NULL
                OR ((p_flow.key_concurrency IS NULL
                     OR k.leased + r.picked + r.nth <= p_flow.key_concurrency)
                    AND (p_flow.key_rate_count IS NULL
                         OR k.claimed + r.picked + r.nth <= p_flow.key_rate_count)
                    -- ordered: only the first live job of its key (by id), one per claim
                    AND (NOT p_flow.ordered
                         OR (r.picked = 0 AND NOT EXISTS (
                                SELECT 1 FROM drainpipe.job_messages e
                                 WHERE e.queue = v_queue AND drainpipe.job_key(e.payload) = r.k
                                   AND e.finished_at IS NULL AND e.id < r.id
                                   AND drainpipe.job_key(e.payload) IS NOT NULL))))
             ORDER BY r.visible_at, r.id
             LIMIT v_room
        )
        SELECT array_agg(a.id ORDER BY a.visible_at, a.id), array_agg(a.k ORDER BY a.visible_at, a.id),
               (SELECT count(*) FROM chunk),
               (SELECT max(c.visible_at) FROM chunk c),
               (SELECT c.id FROM chunk c ORDER BY c.visible_at DESC, c.id DESC LIMIT 1)
          INTO v_take, v_take_keys, v_rows, v_after_at, v_after_id
          FROM allowed a;
        IF v_take IS NOT NULL THEN
            v_ids := v_ids || v_take;
            v_keys := v_keys || v_take_keys;
            v_room := v_room - cardinality(v_take);
        END IF;
        v_scanned := v_scanned + v_rows;
        EXIT WHEN v_rows < v_chunk;
        v_chunk := least(v_chunk * 4, v_bound);
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN v_ids;
    END IF;
    -- The flow lock keeps other limited claims of this queue out; a cancel or a
    -- completion may hold a row: skip it, and read the row as it is once locked.
    RETURN ARRAY(
        SELECT x.id FROM drainpipe.job_messages x
         WHERE x.id = ANY (v_ids) AND x.finished_at IS NULL AND x.visible_at <= p_now
           AND x.attempts < x.max_attempts
         ORDER BY x.visible_at, x.id
           FOR UPDATE SKIP LOCKED);
END
$$;

-- The turn of jobs 0012 with the flow branch: a queue with a queue_flow row picks through
-- job_messages_flow_pick; every other statement (completions, pause, sweep, take-over
-- records, the update) is 0012's, and a queue without limits runs 0012's pick unchanged.
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
        -- limits per key: the pick they allow (jobs 0015), rows locked
        v_ids := drainpipe.job_messages_flow_pick(v_flow, v_batch, v_now);
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
        SELECT bool_or(x.state = 'leased') INTO v_lapsed
          FROM drainpipe.job_messages x WHERE x.id = ANY (v_ids);
    ELSE
    IF v_flow.queue IS NOT NULL THEN
        -- queue-wide limits only: the pick below, no larger than the room they leave
        v_batch := drainpipe.job_messages_flow_room(v_flow, v_batch, v_now);
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;
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

-- JobRecord.held_by of queued jobs (docs/flow-control.md#what-held-means): for each
-- (queue, id) of p_queues/p_ids that is queued, eligible at p_now and held by its queue's
-- limits, why: 'order' (an earlier job of its key is live), 'concurrency' (the queue's or
-- its key's leased jobs are at the limit), 'rate' (the queue's or its key's window is
-- full). Jobs not held, and queues without limits, give no row.
CREATE OR REPLACE FUNCTION drainpipe.job_flow_holds_v1(
    p_queues text[], p_ids bigint[], p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (queue text, id bigint, held_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN QUERY
    SELECT h.queue, h.id, h.held_by FROM (
        SELECT j.queue, j.id, CASE
            WHEN f.ordered AND k.key IS NOT NULL AND EXISTS (
                     SELECT 1 FROM drainpipe.job_messages e
                      WHERE e.queue = j.queue AND drainpipe.job_key(e.payload) = k.key
                        AND drainpipe.job_key(e.payload) IS NOT NULL
                        AND e.finished_at IS NULL AND e.id < j.id) THEN 'order'
            WHEN f.concurrency IS NOT NULL AND (
                     SELECT count(*) FROM drainpipe.job_messages l
                      WHERE l.queue = j.queue AND l.state = 'leased' AND l.visible_at > v_now
                 ) >= f.concurrency THEN 'concurrency'
            WHEN f.key_concurrency IS NOT NULL AND k.key IS NOT NULL AND (
                     SELECT count(*) FROM drainpipe.job_messages l
                      WHERE l.queue = j.queue AND drainpipe.job_key(l.payload) = k.key
                        AND l.state = 'leased' AND l.visible_at > v_now
                 ) >= f.key_concurrency THEN 'concurrency'
            WHEN f.rate_count IS NOT NULL AND (
                     SELECT count(*) FROM drainpipe.flow_claims c
                      WHERE c.queue = j.queue
                        AND c.claimed_at > v_now - make_interval(secs => f.rate_per)
                 ) >= f.rate_count THEN 'rate'
            WHEN f.key_rate_count IS NOT NULL AND k.key IS NOT NULL AND (
                     SELECT count(*) FROM drainpipe.flow_claims c
                      WHERE c.queue = j.queue AND c.key = k.key
                        AND c.claimed_at > v_now - make_interval(secs => f.key_rate_per)
                 ) >= f.key_rate_count THEN 'rate'
            END AS held_by
          FROM unnest(p_queues, p_ids) AS w(queue, id)
          JOIN drainpipe.queue_flow f ON f.queue = w.queue
          JOIN drainpipe.job_messages j ON j.id = w.id AND j.queue = w.queue
         CROSS JOIN LATERAL (SELECT drainpipe.job_key(j.payload) AS key) k
         WHERE j.state = 'queued' AND j.finished_at IS NULL AND j.visible_at <= v_now
    ) h
    WHERE h.held_by IS NOT NULL;
END
$$;

-- Debounce (enqueue_flow_job_v1): job p_id of p_queue, while still queued (never claimed,
-- live), gets p_payload and becomes eligible p_seconds from now. True when it did.
CREATE OR REPLACE FUNCTION drainpipe.debounce_job(
    p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE drainpipe.job_messages m
       SET payload = coalesce(p_payload, '{}'::jsonb),
           visible_at = clock_timestamp() + make_interval(secs => greatest(p_seconds, 0))
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = 0 AND m.finished_at IS NULL
       AND m.state = 'queued';
    RETURN FOUND;
END
$$;
