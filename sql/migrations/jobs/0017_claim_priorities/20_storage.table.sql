-- The table: priorities in the claim (10_priorities.sql). A prioritised queue's claim picks
-- through job_messages_priority_pick, one range of job_messages_priority_idx per level;
-- every other queue's pick is jobs 0015's, after one more primary-key probe.

-- Built when a first queue gets a job with a non-zero priority (note_job_priority), so a
-- database that never uses priorities pays nothing for it. A plain CREATE INDEX in that
-- enqueue's transaction: writes wait while it reads the table (on a large table, build it
-- CONCURRENTLY by hand first). Leased rows are in it too: a lapsed lease is picked again
-- at its job's priority.
CREATE OR REPLACE FUNCTION drainpipe.ensure_priority_claim(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CREATE INDEX IF NOT EXISTS job_messages_priority_idx
        ON drainpipe.job_messages (queue, drainpipe.job_priority(payload), visible_at, id)
        WHERE finished_at IS NULL;
END
$$;

-- The ids (locked) of at most p_batch ready jobs of p_queue at p_now, by priority: the
-- levels p_levels (highest first, as queue_priorities keeps them), and within a level
-- oldest eligible first, then id. Each level starts at its own bound (jobs 0014, named by
-- priority_bound_name) when p_bound, and comes again from its start when short above it,
-- as the unlimited pick does: a level costs an index descent, and a claim stops at the
-- level that fills its batch.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_priority_pick(
    p_queue text, p_levels integer[], p_batch integer, p_now timestamptz, p_bound boolean
)
RETURNS bigint[]
-- runs under the settings of complete_and_claim_jobs_v1, its only caller (generic plans,
-- no seqscans; a SET clause costs every call a save and restore)
LANGUAGE plpgsql
AS $$
DECLARE
    v_level integer;
    v_ids bigint[] := '{}';
    v_take bigint[];
    v_need integer;
    v_first timestamptz;
    v_from timestamptz;
BEGIN
    FOREACH v_level IN ARRAY p_levels LOOP
        v_need := p_batch - cardinality(v_ids);
        v_from := CASE WHEN p_bound
                       THEN drainpipe.claim_bound(drainpipe.priority_bound_name(p_queue, v_level), p_now)
                       ELSE '-infinity' END;
        LOOP
            SELECT array_agg(p.id), min(p.visible_at) INTO v_take, v_first
              FROM (
                  SELECT x.id, x.visible_at
                    FROM drainpipe.job_messages x
                   -- the level's range, [v_from, p_now], as row comparisons: only the
                   -- priority index serves them (a generic plan would otherwise read the
                   -- live index and filter by level)
                   WHERE x.queue = p_queue
                     AND (drainpipe.job_priority(x.payload), x.visible_at) >= (v_level, v_from)
                     AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                     AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                   ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                   LIMIT v_need
                     FOR UPDATE SKIP LOCKED
              ) p;
            EXIT WHEN v_from = '-infinity' OR coalesce(cardinality(v_take), 0) >= v_need;
            v_from := '-infinity';  -- short above the bound: this level from its start
        END LOOP;
        IF p_bound THEN
            PERFORM drainpipe.keep_claim_bound(drainpipe.priority_bound_name(p_queue, v_level),
                                               v_first, NULL);
        END IF;
        v_ids := v_ids || coalesce(v_take, '{}');
        EXIT WHEN cardinality(v_ids) >= p_batch;
    END LOOP;
    RETURN v_ids;
END
$$;

-- -- enqueue: jobs 0013's, noting a non-zero priority ---------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job_v1(
    p_queue text,
    p_payload jsonb DEFAULT '{}',
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5,
    p_dedupe_key text DEFAULT NULL,
    p_dedupe_running boolean DEFAULT true
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_at timestamptz;
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF p_payload ? 'priority' THEN
        -- a non-zero priority: the queue's claims order by it from now on (10_priorities.sql)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    IF p_dedupe_key IS NULL THEN
        -- the common case stays one INSERT
        SELECT s.id, s.at INTO v_id, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
        INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at)
        OVERRIDING SYSTEM VALUE
        VALUES (v_id, p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, v_at,
                clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)));
        RETURN v_id;
    END IF;
    RETURN drainpipe.enqueue_keyed_job(p_queue, p_payload, p_delay, p_max_attempts,
                                       p_dedupe_key, p_dedupe_running, NULL);
END
$$;

-- Many jobs: the ids and their stamps in one pass, in payload order; an id whose clock
-- reads were too far apart is drawn again (job_stamp), so it comes after the others.
CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs_v1(
    p_queue text,
    p_payloads jsonb,
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- read once: a function with its own settings is called, not inlined, for every row
    v_window interval := drainpipe.job_stamp_window();
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF p_payloads @? '$[*].priority' THEN
        -- a non-zero priority among them: see enqueue_job_v1
        PERFORM drainpipe.note_job_priorities(p_queue, p_payloads);
    END IF;
    RETURN QUERY
    WITH drawn AS MATERIALIZED (
        SELECT e.n, e.value, clock_timestamp() AS before_at,
               nextval('drainpipe.job_messages_id_seq'::regclass) AS id, clock_timestamp() AS at
          FROM jsonb_array_elements(p_payloads) WITH ORDINALITY AS e(value, n)
         ORDER BY e.n
    ), stamped AS (
        SELECT d.n, d.value, d.id, d.at,
               CASE WHEN d.at - d.before_at > v_window
                    THEN drainpipe.job_stamp('drainpipe.job_messages_id_seq') END AS again
          FROM drawn d
        OFFSET 0
    )
    INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at)
    OVERRIDING SYSTEM VALUE
    SELECT coalesce((s.again).id, s.id), p_queue, s.value, p_max_attempts,
           coalesce((s.again).at, s.at),
           clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0))
      FROM stamped s
     ORDER BY s.n
    RETURNING id;
END
$$;

-- -- the queue-wide room: jobs 0015's, the first count skipped on a session's hint --------

-- jobs 0015's, with the hint (10_priorities.sql): the room a limited claim of p_batch has under the queue-wide limits (concurrency, rate),
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
        -- the session's last count under the gate, while far from the limit (jobs 0017,
        -- flow_leased_hint), else a count
        v_leased := drainpipe.flow_leased_hint(p_flow);
        IF v_leased IS NULL THEN
            SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
             WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
        END IF;
    END IF;
    v_beside := drainpipe.flow_gate(p_flow, p_batch, v_leased);
    IF p_flow.concurrency IS NOT NULL THEN
        -- again, under the lock: what committed while this claim waited counts
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
        PERFORM drainpipe.keep_flow_leased(p_flow.queue, v_leased);
    END IF;
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + v_beside, p_now);
END
$$;

-- -- the limited pick of a prioritised queue: jobs 0015's job_messages_flow_pick (which a
-- limited queue without priorities keeps) along the priority levels p_levels ---------------

-- The ids (locked) of at most p_batch ready jobs of p_flow's queue that its limits allow
-- at p_now, oldest eligible first, the held ones skipped. The caller holds nothing; this
-- takes the queue's flow lock (see 10_flow.sql) until the caller's transaction ends.
-- Candidates are read in chunks along the same index as the unlimited pick; each chunk is
-- filtered in one statement (a probe per distinct key), so a claim of 10 where half the
-- keys are held reads about 20 rows. At most p_batch * 50 + 500 candidates are looked at:
-- a claim behind that many held jobs returns what it found (possibly nothing), and the
-- next claim, after some finish, takes them.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_priority_pick(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz, p_levels integer[]
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
    v_level integer;
    v_levels integer[] := coalesce(p_levels, '{0}');
    v_n integer := 1;
    v_c_ids bigint[];
    v_c_at timestamptz[];
    v_c_keys text[];
    v_c_seq integer[];
BEGIN
    v_room := drainpipe.job_messages_flow_room(p_flow, p_batch, p_now);
    v_chunk := 2 * v_room + 8;
    v_level := v_levels[1];
    WHILE v_room > 0 AND v_scanned < v_bound LOOP
        -- the next chunk of candidates, along the current priority level's range
        SELECT array_agg(c.id ORDER BY c.visible_at, c.id), array_agg(c.visible_at ORDER BY c.visible_at, c.id),
               array_agg(c.k ORDER BY c.visible_at, c.id)
          INTO v_c_ids, v_c_at, v_c_keys
          FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                  FROM drainpipe.job_messages x
                 -- the level's range after the last candidate (as in the priority pick)
                 WHERE x.queue = v_queue
                   AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                           > (v_level, v_after_at, v_after_id)
                   AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                   AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                 ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                 LIMIT v_chunk) c;
        v_rows := coalesce(cardinality(v_c_ids), 0);
        -- the candidates' place in the claim's order, across levels
        v_c_seq := ARRAY(SELECT v_n + g FROM generate_series(0, v_rows - 1) g);
        v_n := v_n + v_rows;
        WITH chunk AS (
            SELECT c.id, c.visible_at, c.k, c.seq
              FROM unnest(v_c_ids, v_c_at, v_c_keys, v_c_seq) AS c(id, visible_at, k, seq)
        ), ranked AS (
            -- nth: the place of a job among this chunk's jobs of its key
            SELECT c.*, row_number() OVER (PARTITION BY c.k ORDER BY c.seq) AS nth,
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
            SELECT r.id, r.k, r.seq
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
             ORDER BY r.seq
             LIMIT v_room
        )
        SELECT array_agg(a.id ORDER BY a.seq), array_agg(a.k ORDER BY a.seq)
          INTO v_take, v_take_keys
          FROM allowed a;
        IF v_take IS NOT NULL THEN
            v_ids := v_ids || v_take;
            v_keys := v_keys || v_take_keys;
            v_room := v_room - cardinality(v_take);
        END IF;
        v_scanned := v_scanned + v_rows;
        IF v_rows < v_chunk THEN
            -- this level (or the queue) has no more candidates: the next level, from its start
            EXIT WHEN v_level = v_levels[cardinality(v_levels)];
            v_level := v_levels[array_position(v_levels, v_level) + 1];
            v_after_at := '-infinity';
            v_after_id := 0;
        ELSE
            v_after_at := v_c_at[v_rows];
            v_after_id := v_c_ids[v_rows];
            v_chunk := least(v_chunk * 4, v_bound);
        END IF;
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
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED);
END
$$;

-- -- the turn: jobs 0015's, with the priority pick for a prioritised queue -----------------

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
        -- limits per key: the pick they allow (jobs 0015), rows locked
        IF v_levels IS NULL THEN
            v_ids := drainpipe.job_messages_flow_pick(v_flow, v_batch, v_now);
        ELSE
            -- a prioritised queue: the same filter along its levels (jobs 0017)
            v_ids := drainpipe.job_messages_flow_priority_pick(v_flow, v_batch, v_now, v_levels);
        END IF;
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

-- -- debounce: jobs 0015's, noting the new payload's priority -------------------------------

-- Debounce (enqueue_flow_job_v1), jobs 0015's: job p_id of p_queue, while still queued
-- (never claimed, live), gets p_payload and becomes eligible p_seconds from now. True when
-- it did.
CREATE OR REPLACE FUNCTION drainpipe.debounce_job(
    p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_payload ? 'priority' THEN
        -- the new payload's priority is a level the claim reads (jobs 0017)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    UPDATE drainpipe.job_messages m
       SET payload = coalesce(p_payload, '{}'::jsonb),
           visible_at = clock_timestamp() + make_interval(secs => greatest(p_seconds, 0))
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = 0 AND m.finished_at IS NULL
       AND m.state = 'queued';
    RETURN FOUND;
END
$$;

-- Jobs enqueued with a priority before this migration (stored, not yet ordered by): their
-- queues and levels are noted now, so none is left at a level its claim does not read.
DO $noted$
DECLARE
    v_queues text[];
    v_levels integer[];
BEGIN
    -- read whole first: noting builds an index on the table the read would still use
    SELECT array_agg(s.queue), array_agg(s.level) INTO v_queues, v_levels
      FROM (SELECT DISTINCT m.queue, drainpipe.job_priority(m.payload) AS level
              FROM drainpipe.job_messages m
             WHERE m.finished_at IS NULL AND m.payload ? 'priority'
               AND drainpipe.job_priority(m.payload) <> 0) s;
    FOR i IN 1 .. coalesce(cardinality(v_queues), 0) LOOP
        PERFORM drainpipe.note_job_priority(v_queues[i], v_levels[i]);
    END LOOP;
END
$noted$;
