-- drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules.
-- This part: the table storage (every queue in drainpipe.job_messages).
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.job_dead_letters (
    id bigint NOT NULL,
    queue text NOT NULL,
    message jsonb NOT NULL,
    attempts integer NOT NULL,
    enqueued_at timestamp with time zone NOT NULL,
    died_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT job_dead_letters_pkey PRIMARY KEY (id)
);
CREATE INDEX IF NOT EXISTS job_dead_letters_died_brin ON drainpipe.job_dead_letters USING brin (died_at);
CREATE INDEX IF NOT EXISTS job_dead_letters_queue_idx ON drainpipe.job_dead_letters USING btree (queue, id);
ALTER TABLE drainpipe.job_dead_letters ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_messages (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    queue text NOT NULL,
    payload jsonb NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    dedupe_key text,
    last_error text,
    enqueued_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    visible_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    state text DEFAULT 'queued'::text NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    last_code text,
    parent_id bigint,
    replayed_by bigint,
    CONSTRAINT job_messages_pkey PRIMARY KEY (id)
);
CREATE INDEX IF NOT EXISTS job_messages_dead_idx ON drainpipe.job_messages USING btree (queue, id) WHERE ((state = 'dead'::text) AND (replayed_by IS NULL));
CREATE INDEX IF NOT EXISTS job_messages_exhausted_live_idx ON drainpipe.job_messages USING btree (queue, visible_at) WHERE ((finished_at IS NULL) AND (attempts >= max_attempts));
CREATE INDEX IF NOT EXISTS job_messages_finished_idx ON drainpipe.job_messages USING btree (queue, finished_at) INCLUDE (state) WHERE (finished_at IS NOT NULL);
CREATE INDEX IF NOT EXISTS job_messages_live_idx ON drainpipe.job_messages USING btree (queue, visible_at, id) WHERE (finished_at IS NULL);
CREATE INDEX IF NOT EXISTS job_messages_live_key_idx ON drainpipe.job_messages USING btree (queue, dedupe_key) WHERE ((dedupe_key IS NOT NULL) AND (finished_at IS NULL));
CREATE UNIQUE INDEX IF NOT EXISTS job_messages_waiting_key_idx ON drainpipe.job_messages USING btree (queue, dedupe_key) WHERE ((dedupe_key IS NOT NULL) AND (attempts = 0) AND (finished_at IS NULL));
ALTER TABLE drainpipe.job_messages SET (vacuum_index_cleanup=on, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=5000);
ALTER TABLE drainpipe.job_messages ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'on' SET jit TO 'off' AS $function$
BEGIN
    -- no writer between the count and the triggers: the counter starts exact
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'job_messages_policy_insert'
                      AND tgrelid = 'drainpipe.job_messages'::regclass) THEN
        CREATE TRIGGER job_messages_policy_insert AFTER INSERT ON drainpipe.job_messages
            REFERENCING NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.job_messages_policy_insert();
    END IF;
    PERFORM drainpipe.ensure_lease_bound();
    INSERT INTO drainpipe.queue_pending (queue, live)
    SELECT p_queue, count(*) FROM drainpipe.job_messages WHERE queue = p_queue AND finished_at IS NULL
    ON CONFLICT (queue) DO UPDATE SET live = excluded.live;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.finished_at IS NOT NULL THEN
        RETURN 'terminal';
    END IF;
    IF v_job.state = 'leased' AND v_job.visible_at <= v_now THEN
        -- the lease ran out: that attempt expired (and a last attempt made the job dead)
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_job.visible_at, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        IF v_job.attempts >= v_job.max_attempts THEN
            UPDATE drainpipe.job_messages
               SET state = 'dead', finished_at = v_job.visible_at, last_code = 'MAX_ATTEMPTS',
                   last_error = 'The lease ran out on the last attempt'
             WHERE id = p_id;
            RETURN 'terminal';
        END IF;
    ELSIF v_job.state = 'leased' THEN
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_now, 'cancelled', 'CANCELLED')
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'cancelled', finished_at = v_now, last_code = 'CANCELLED'
     WHERE id = p_id;
    RETURN 'cancelled';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.child_job_states(p_queue text, p_ids bigint[])
 RETURNS TABLE(id bigint, state text, last_code text) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT i.id,
           CASE WHEN m.id IS NULL THEN 'purged' WHEN m.finished_at IS NULL THEN 'live' ELSE m.state END,
           CASE WHEN m.finished_at IS NOT NULL THEN m.last_code END
      FROM unnest(p_ids) WITH ORDINALITY AS i(id, n)
      LEFT JOIN drainpipe.job_messages m ON m.id = i.id AND m.queue = p_queue
     ORDER BY i.n $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(p_queue text, p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_row_v1 LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts, c.last_error
      FROM drainpipe.complete_and_claim_jobs_v1(p_queue, '{}'::bigint[], '{}'::integer[],
                                                p_lease, p_batch, p_now) AS c $function$;

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
    v_from timestamptz := '-infinity';  -- where the pick's scan starts (claim_bound)
    v_first timestamptz;
    v_levels integer[];  -- the queue's priority levels, when it has any
    v_max double precision;  -- the queue's max_lease, when it has a policy
    v_room integer;
    v_taken integer;
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
        RETURN;  -- paused: the completions above stand, nothing is claimed
    END IF;
    -- the queue's flow limits, if it has any
    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = p_queue;
    -- and its priorities, if it ever had a job with one
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
        -- limits per key: the room the queue-wide limits leave, under the queue's flow lock
        v_room := drainpipe.job_messages_flow_room(v_flow, v_batch, v_now);
        IF v_room > 0 AND v_levels IS NULL AND v_flow.rate_count IS NULL
           AND v_flow.key_rate_count IS NULL AND NOT v_flow.ordered
           AND NOT EXISTS (SELECT 1 FROM drainpipe.queue_policies p
                            WHERE p.queue = p_queue
                              AND v_until > v_now + make_interval(secs => p.max_lease + 1)) THEN
            -- key_concurrency alone (and perhaps concurrency), no priorities, a lease within
            -- max_lease: the pick's first pass and the lease in one statement. Under the
            -- lock, every limited claim before this one has committed when its snapshot is
            -- taken
            RETURN QUERY
            WITH picked AS (
                SELECT c.id, c.k, c.visible_at, y.state, y.attempts, y.started_at, y.until
                  FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                          FROM drainpipe.job_messages x
                         WHERE x.queue = p_queue AND x.finished_at IS NULL AND x.visible_at <= v_now
                           AND x.attempts < x.max_attempts
                         ORDER BY x.visible_at, x.id
                         LIMIT 2 * v_room + 8) c
                 -- the lock, row by row as candidates fit (the filter below is applied to c,
                 -- before the join): a row another transaction holds is skipped, and one
                 -- changed since is read as it is now
                 CROSS JOIN LATERAL (
                      SELECT z.state, z.attempts, z.started_at, z.visible_at AS until
                        FROM drainpipe.job_messages z
                       WHERE z.id = c.id AND z.finished_at IS NULL AND z.visible_at <= v_now
                         AND z.attempts < z.max_attempts
                         FOR UPDATE SKIP LOCKED) y
                 -- a job fits while its key has fewer than key_concurrency leased (a probe
                 -- that stops at the key_concurrency-th lease)
                 WHERE c.k IS NULL
                    OR NOT EXISTS (
                           SELECT 1 FROM drainpipe.job_messages l
                            WHERE l.queue = p_queue AND drainpipe.job_key(l.payload) = c.k
                              AND l.state = 'leased' AND l.visible_at > v_now
                           OFFSET v_flow.key_concurrency - 1)
                 LIMIT v_room
            ), leasing AS (
                -- one job of a key per pass: the probe saw none of the pass's jobs leased, so
                -- a second one of the key might not fit (the pick's passes take it after)
                SELECT p.id, p.state, p.attempts, p.started_at, p.until
                  FROM (SELECT p0.*, row_number() OVER (PARTITION BY p0.k ORDER BY p0.visible_at, p0.id) AS nth
                          FROM picked p0) p
                 WHERE p.k IS NULL OR p.nth = 1
            ), expired AS (
                -- a lease that ran out: that attempt expired, and this claim takes it over
                INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
                SELECT p_queue, l.id, l.attempts, l.started_at, l.until, 'expired', 'LEASE_EXPIRED'
                  FROM leasing l WHERE l.state = 'leased'
                ON CONFLICT DO NOTHING
            )
            UPDATE drainpipe.job_messages j
               SET attempts = j.attempts + 1, visible_at = v_until, started_at = v_now, state = 'leased'
             WHERE j.id = ANY (ARRAY(SELECT l.id FROM leasing l))
            RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.payload, j.max_attempts,
                      j.last_error, false;
            GET DIAGNOSTICS v_taken = ROW_COUNT;
            -- short (held keys, a key twice or locked rows in the pass): the pick's passes
            -- for the rest of the room, which count this statement's leases
            v_room := v_room - v_taken;
        END IF;
        IF v_room = 0 THEN
            RETURN;
        END IF;
        -- the pick the limits allow, along the levels of a prioritised queue, rows locked,
        -- and whether one of them is a lapsed lease
        SELECT p.ids, p.lapsed INTO v_ids, v_lapsed
          FROM drainpipe.job_messages_flow_take(v_flow, v_room, v_now, v_levels) p;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    ELSE
    IF v_flow.queue IS NOT NULL THEN
        -- queue-wide limits only: the pick below, no larger than the room they leave: the
        -- connection's chunk, spent by an expression inlined here (flow_budget_spend), else counted
        v_batch := coalesce(drainpipe.flow_budget_spend(p_queue, v_batch),
                            drainpipe.job_messages_flow_room(v_flow, v_batch, v_now));
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF v_levels IS NOT NULL THEN
        -- priorities: the pick by level, highest first, rows locked
        v_ids := drainpipe.job_messages_priority_pick(p_queue, v_levels, v_batch, v_now, p_now IS NULL);
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
        SELECT bool_or(x.state = 'leased') INTO v_lapsed
          FROM drainpipe.job_messages x WHERE x.id = ANY (v_ids);
    ELSE
    -- The pick is a statement of its own, into arrays: the take-over record below is then a
    -- branch taken only when a lapsed lease was picked, not a statement every claim runs. It
    -- starts at this connection's bound for the queue (claim_bound), once more from the
    -- start when short.
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
    -- a lease longer than the queue's max_lease is refused here, once a claim, where a
    -- trigger on the update would fetch and lock every updated row again
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
        -- the rate windows count the attempts just started
        PERFORM drainpipe.flow_record_claims(v_flow,
            ARRAY(SELECT drainpipe.job_key(x.payload) FROM drainpipe.job_messages x
                   WHERE x.id = ANY (v_ids)),
            v_now);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    c_leased constant text := 'leased';
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_done integer;
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET state = 'succeeded', finished_at = v_now, last_code = NULL
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue AND m.state = c_leased
    RETURNING m.id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_ids) THEN
        UPDATE drainpipe.job_attempts a
           SET late_outcome = 'succeeded'
          FROM unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE a.queue = p_queue AND a.job_id = f.id AND a.number = f.attempt
           AND a.outcome = 'cancelled' AND a.late_outcome IS NULL;
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.count_live_jobs(p_queue text, p_limit bigint)
 RETURNS bigint LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT count(*) FROM (
        SELECT 1 FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.finished_at IS NULL LIMIT p_limit) x $function$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
 RETURNS SETOF bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT m.id FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.state = 'dead' AND m.replayed_by IS NULL
       AND (p_ids IS NULL OR m.id = ANY (p_ids))
     ORDER BY m.id DESC
     LIMIT greatest(coalesce(p_batch, 1000), 1) $function$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_message(p_payload jsonb, p_max_attempts integer, p_dedupe_key text, p_last_error text)
 RETURNS jsonb LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('payload', p_payload, 'max_attempts', p_max_attempts,
                              'last_error', p_last_error, 'dead', true)
           || CASE WHEN p_dedupe_key IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('dedupe_key', p_dedupe_key) END $function$;

CREATE OR REPLACE FUNCTION drainpipe.debounce_job(p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_payload ? 'priority' THEN
        -- the new payload's priority is a level the claim reads (queue_priorities)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    UPDATE drainpipe.job_messages m
       SET payload = coalesce(p_payload, '{}'::jsonb),
           visible_at = clock_timestamp() + make_interval(secs => greatest(p_seconds, 0))
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = 0 AND m.finished_at IS NULL
       AND m.state = 'queued';
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.delete_finished_jobs(p_queue text, p_before timestamp with time zone, p_dead_before timestamp with time zone, p_batch integer)
 RETURNS bigint[] LANGUAGE sql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH gone AS (
        DELETE FROM drainpipe.job_messages d
         WHERE d.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NOT NULL
                  -- the later bound first: a range of the finished index
                  AND x.finished_at < greatest(p_before, p_dead_before)
                  AND x.finished_at < CASE WHEN x.state = 'dead' THEN p_dead_before ELSE p_before END
                ORDER BY x.finished_at
                LIMIT greatest(coalesce(p_batch, 10000), 1)))
        RETURNING d.queue, d.id
    ), attempts_gone AS (
        DELETE FROM drainpipe.job_attempts a USING gone g
         WHERE a.queue = g.queue AND a.job_id = g.id
    )
    SELECT coalesce(array_agg(id), '{}') FROM gone $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job_v1(p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5, p_dedupe_key text DEFAULT NULL::text, p_dedupe_running boolean DEFAULT true)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs_v1(p_queue text, p_payloads jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_keyed_job(p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer, p_dedupe_key text, p_dedupe_running boolean, p_parent_id bigint)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_id bigint;
    v_at timestamptz;
BEGIN
    -- one enqueuer per (queue, key) at a time, so two callers cannot both miss each other
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.job:' || p_queue), hashtext(p_dedupe_key));
    SELECT m.id INTO v_id
      FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key AND m.finished_at IS NULL
       AND (p_dedupe_running OR m.attempts = 0)
       -- a job whose last lease ran out is dead already, whatever the sweep says
       AND NOT (m.attempts >= m.max_attempts AND m.visible_at <= clock_timestamp())
     ORDER BY m.id
     LIMIT 1;
    IF v_id IS NOT NULL THEN
        RETURN v_id;
    END IF;
    SELECT s.id, s.at INTO v_id, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
    INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, dedupe_key, enqueued_at,
                                        visible_at, parent_id)
    OVERRIDING SYSTEM VALUE
    VALUES (v_id, p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, p_dedupe_key, v_at,
            clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), p_parent_id)
    -- The lock makes a clash impossible under READ COMMITTED. A caller's REPEATABLE READ
    -- transaction may not see a waiting job committed after its snapshot: DO NOTHING then
    -- fails with 40001 (kind "serialization", retry), not a unique violation.
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND attempts = 0 AND finished_at IS NULL
    DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT m.id INTO v_id FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key AND m.attempts = 0
           AND m.finished_at IS NULL;
    END IF;
    RETURN v_id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- the window a policy queue's count reads (the claim and the heartbeat hold every
    -- lease to max_lease)
    PERFORM drainpipe.keep_flow_lease_window(p_queue,
        'SELECT max(l.visible_at) FROM drainpipe.job_messages l
          WHERE l.queue = $2 AND l.finished_at IS NULL AND l.state = ''leased'' AND l.visible_at > $1');
    -- what is leased, per queue (concurrency) or per queue and key (key_concurrency), bounded
    -- by the limits: only leased rows are in it. The index is table-wide, so every queue's
    -- claims pay for its entries: the key's only when a key limit reads it. The keyed one also
    -- serves the queue-wide counts, and is never dropped here: a key limit committed beside
    -- a concurrency-only queue's ensure must still find it afterwards. Either is a way to
    -- count faster, never a condition of a count's being exact.
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.key_concurrency IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), visible_at)
            WHERE state = 'leased';
        DROP INDEX IF EXISTS drainpipe.job_messages_flow_leased_queue_idx;
    ELSIF to_regclass('drainpipe.job_messages_flow_leased_idx') IS NOT NULL THEN
        NULL;  -- the keyed index counts for every queue
    ELSIF EXISTS (SELECT 1 FROM drainpipe.queue_flow f
                   WHERE (f.concurrency IS NOT NULL AND f.lease_window IS NULL)
                      -- the per-key pick (job_messages_flow_take) plans its key probe, taken
                      -- or not, on a leased index: without one the plan is a disabled scan
                      OR f.ordered OR f.key_rate_count IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_queue_idx
            ON drainpipe.job_messages (queue, visible_at)
            WHERE state = 'leased';
    ELSE
        DROP INDEX IF EXISTS drainpipe.job_messages_flow_leased_queue_idx;
    END IF;
    -- the live jobs of a key in enqueue order: ordered=True probes for an earlier one
    -- (ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
            WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_bound()
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- the table has no lease constraint: the claim and the heartbeat, the only writers of
    -- a lease (the table grants nothing), check max_lease themselves once a call. Kept as
    -- the storage's answer to the call pgmq's policies make (its queues' tables take writes
    -- from pgmq's own functions, so there a check constraint holds the bound).
    RETURN;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_priority_claim(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    CREATE INDEX IF NOT EXISTS job_messages_priority_idx
        ON drainpipe.job_messages (queue, drainpipe.job_priority(payload), visible_at, id)
        WHERE finished_at IS NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_overview_v1(p_queues text[], p_force boolean DEFAULT false)
 RETURNS bigint LANGUAGE sql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
 SELECT CASE WHEN p_force THEN drainpipe.recount_job_totals_v1(p_queues) ELSE 0 END $function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    c_leased constant text := 'leased';
    v_until timestamptz := coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(p_lease, 0));
    v_max double precision;
    v_over interval;
BEGIN
    -- a heartbeat's lease is measured from now (from the attempt's start if that is later):
    -- the rows are read only when the lease may be too long (no trigger reads every row)
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

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(p_queue text, p_id bigint, p_attempt integer, p_error text, p_retry_in double precision DEFAULT NULL::double precision, p_code text DEFAULT NULL::text, p_discard boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    v_job drainpipe.job_messages;
    v_error text := left(coalesce(p_error, 'null'), 4000);
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_code text := CASE WHEN drainpipe.is_job_code(p_code) THEN p_code ELSE 'HANDLER_ERROR' END;
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.state <> 'leased' THEN
        IF v_job.state = 'cancelled' THEN
            UPDATE drainpipe.job_attempts SET late_outcome = 'failed'
             WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
               AND outcome = 'cancelled' AND late_outcome IS NULL;
        END IF;
        RETURN NULL;
    END IF;
    INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
    VALUES (p_queue, p_id, p_attempt, v_job.started_at, v_now,
            CASE WHEN coalesce(p_discard, false) THEN 'discarded' ELSE 'failed' END, v_code)
    ON CONFLICT DO NOTHING;
    IF coalesce(p_discard, false) OR v_job.attempts >= v_job.max_attempts THEN
        UPDATE drainpipe.job_messages
           SET state = 'dead', finished_at = v_now, last_error = v_error,
               last_code = CASE WHEN coalesce(p_discard, false) THEN v_code ELSE 'MAX_ATTEMPTS' END
         WHERE id = p_id;
        RETURN 'dead';
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'retry_wait', last_error = v_error, last_code = v_code,
           visible_at = v_now + make_interval(
               secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_job.attempts)), 0))
     WHERE id = p_id;
    RETURN 'queued';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.finished_jobs_by_minute(p_queue text, p_from timestamp with time zone)
 RETURNS TABLE(totals jsonb, enqueued jsonb, succeeded jsonb) LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- job_queue_overview_v1's finished jobs: the totals the triggers keep (35_totals), and
    -- those since p_from by minute, enqueued and succeeded
    SELECT (SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb)
              FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                     WHERE t.queue = p_queue GROUP BY t.state) s),
           (SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), '{}'::jsonb)
              FROM (SELECT date_trunc('minute', f.enqueued_at) AS minute, count(*) AS n
                      FROM drainpipe.job_messages f
                     WHERE f.queue = p_queue AND f.finished_at >= p_from AND f.enqueued_at >= p_from
                     GROUP BY 1) e),
           (SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), '{}'::jsonb)
              FROM (SELECT date_trunc('minute', f.finished_at) AS minute, count(*) AS n
                      FROM drainpipe.job_messages f
                     WHERE f.queue = p_queue AND f.finished_at >= p_from AND f.state = 'succeeded'
                     GROUP BY 1) s) $function$;

CREATE OR REPLACE FUNCTION drainpipe.hold_job_fence(p_queue text, p_id bigint, p_attempt integer)
 RETURNS timestamp with time zone LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT m.enqueued_at FROM drainpipe.job_messages m
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = p_attempt
       AND m.state = 'leased' AND m.finished_at IS NULL
       FOR UPDATE $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamp with time zone)
 RETURNS TABLE(id bigint, held_by text) LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
#variable_conflict use_column
DECLARE
    -- the keys are read only when a per-key limit needs them (parsing costs every row)
    v_keyed boolean := p_flow.ordered OR p_flow.key_concurrency IS NOT NULL
                       OR p_flow.key_rate_count IS NOT NULL;
    v_leased bigint;
    v_claims bigint;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        v_leased := drainpipe.job_messages_leased(p_flow, p_now);
    END IF;
    IF p_flow.rate_count IS NOT NULL THEN
        SELECT count(*) INTO v_claims FROM drainpipe.flow_claims c
         WHERE c.queue = p_flow.queue
           AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per);
    END IF;
    -- the due jobs (p_ids: those of them only), then each of their keys' counts, probed
    -- once per key on the flow indexes (ensure_flow_indexes)
    RETURN QUERY
    -- materialized: each job's key is parsed once, not once per join
    WITH due AS MATERIALIZED (
        SELECT j.id, CASE WHEN v_keyed THEN drainpipe.job_key(j.payload) END AS key
          FROM drainpipe.job_messages j
         WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
           AND j.visible_at <= p_now AND j.attempts < j.max_attempts
           AND (p_ids IS NULL OR j.id = ANY (p_ids))
    ),
    keys AS (
        SELECT k.key,
               CASE WHEN p_flow.ordered THEN (
                   SELECT min(e.id) FROM drainpipe.job_messages e
                    WHERE e.queue = p_flow.queue AND drainpipe.job_key(e.payload) = k.key
                      AND drainpipe.job_key(e.payload) IS NOT NULL AND e.finished_at IS NULL)
               END AS first_id,
               CASE WHEN p_flow.key_concurrency IS NOT NULL THEN (
                   SELECT count(*) FROM drainpipe.job_messages l
                    WHERE l.queue = p_flow.queue AND drainpipe.job_key(l.payload) = k.key
                      AND l.state = 'leased' AND l.visible_at > p_now)
               END AS leased,
               CASE WHEN p_flow.key_rate_count IS NOT NULL THEN (
                   SELECT count(*) FROM drainpipe.flow_claims c
                    WHERE c.queue = p_flow.queue AND c.key = k.key
                      AND c.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per))
               END AS claims
          FROM (SELECT DISTINCT d.key FROM due d WHERE d.key IS NOT NULL) k
    )
    SELECT h.id, h.held_by FROM (
        SELECT d.id, CASE
                   WHEN k.first_id < d.id THEN 'order'
                   WHEN v_leased >= p_flow.concurrency OR k.leased >= p_flow.key_concurrency
                       THEN 'concurrency'
                   WHEN v_claims >= p_flow.rate_count OR k.claims >= p_flow.key_rate_count
                       THEN 'rate'
               END AS held_by
          FROM due d LEFT JOIN keys k ON k.key = d.key
    ) h
    WHERE h.held_by IS NOT NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(p_flow drainpipe.queue_flow, p_batch integer, p_now timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql AS $function$
DECLARE
    v_leased bigint := 0;
    v_room integer;
BEGIN
    IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
        -- no queue-wide limit (limits per key only): the whole batch, under the queue's flow
        -- lock, the one a claim with a queue-wide limit takes below when it counts
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
        RETURN p_batch;
    END IF;
    -- the claim tried the connection's chunk first (flow_budget_spend)
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
        v_leased := drainpipe.job_messages_leased(p_flow, p_now);
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

CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_take(p_flow drainpipe.queue_flow, p_room integer, p_now timestamp with time zone, p_levels integer[], OUT ids bigint[], OUT lapsed boolean)
 RETURNS record LANGUAGE plpgsql AS $function$
DECLARE
    v_queue text := p_flow.queue;
    v_room integer := p_room;  -- what the queue-wide limits leave (job_messages_flow_room)
    v_limit integer;
    v_keys text[] := '{}';
    v_chunk integer;
    v_scanned integer := 0;
    v_bound integer := p_room * 50 + 500;
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
    v_chunk := least(2 * v_room + 8, v_bound);
    WHILE v_room > 0 LOOP
        v_limit := v_room;
        v_rows := 0;
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
                FROM ((SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                         FROM drainpipe.job_messages x
                        -- no priorities (the other branch is a one-time filter that never runs)
                        WHERE v_level IS NULL
                          AND x.queue = v_queue AND x.finished_at IS NULL
                          AND x.visible_at <= p_now AND x.attempts < x.max_attempts
                          AND (x.visible_at, x.id) > (v_after_at, v_after_id)
                        ORDER BY x.visible_at, x.id
                        LIMIT v_chunk)
                      UNION ALL
                      (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                         FROM drainpipe.job_messages x
                        -- the level's range of job_messages_priority_idx after the last place
                        -- read, as row comparisons: only the priority index serves them
                        WHERE v_level IS NOT NULL
                          AND x.queue = v_queue
                          AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                                  > (v_level, v_after_at, v_after_id)
                          AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                          AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                        ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                        LIMIT v_chunk)) c0
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_leased(p_flow drainpipe.queue_flow, p_now timestamp with time zone)
 RETURNS bigint LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_upto timestamptz := drainpipe.flow_lease_upto(p_flow, p_now);
BEGIN
    -- the queue's leases, exactly: through a leased index when there is one, else through
    -- job_messages_live_idx up to where every lease ends (ensure_flow_indexes)
    RETURN (SELECT count(*) FROM drainpipe.job_messages l
             WHERE l.queue = p_flow.queue AND l.finished_at IS NULL AND l.state = 'leased'
               AND l.visible_at > p_now AND l.visible_at <= v_upto);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_policy_insert()
 RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'on' SET jit TO 'off' AS $function$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.queue, count(*) AS added, max(drainpipe.policy_payload_size(a.payload)) AS largest,
               max(a.visible_at) AS latest
          FROM added a
         WHERE a.queue IN (SELECT p.queue FROM drainpipe.queue_policies p)
         GROUP BY a.queue
    LOOP
        PERFORM drainpipe.check_policy_insert(r.queue, r.added, r.largest, r.latest);
    END LOOP;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_priority_pick(p_queue text, p_levels integer[], p_batch integer, p_now timestamp with time zone, p_bound boolean)
 RETURNS bigint[] LANGUAGE plpgsql AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_due(p_queue text, p_now timestamp with time zone)
 RETURNS bigint LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT count(*) FROM drainpipe.job_messages j
     WHERE j.queue = p_queue AND j.finished_at IS NULL
       AND j.visible_at <= p_now AND j.attempts < j.max_attempts $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v2 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT q.name,
           coalesce(live.ready, 0),
           coalesce(live.in_flight, 0),
           coalesce(live.delayed, 0),
           coalesce(live.exhausted, 0)
             + (SELECT count(*) FROM drainpipe.job_messages d
                 WHERE d.queue = q.name AND d.state = 'dead' AND d.replayed_by IS NULL),
           coalesce(done.succeeded, 0),
           coalesce(done.cancelled, 0),
           extract(epoch FROM clock_timestamp() - live.oldest)::double precision
      FROM unnest(p_queues) AS q(name)
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts < m.max_attempts) AS ready,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts > 0) AS in_flight,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts = 0) AS delayed,
                 count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts) AS exhausted,
                 min(m.enqueued_at) FILTER (WHERE NOT (m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts)) AS oldest
            FROM drainpipe.job_messages m
           WHERE m.queue = q.name AND m.finished_at IS NULL
      ) live ON true
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE f.state = 'succeeded') AS succeeded,
                 count(*) FILTER (WHERE f.state = 'cancelled') AS cancelled
            FROM drainpipe.job_messages f
           WHERE f.queue = q.name AND f.finished_at IS NOT NULL
      ) done ON true $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_records_newest(p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamp with time zone, p_before_id bigint, p_now timestamp with time zone)
 RETURNS TABLE(id bigint, queue text, state text, attempts integer, max_attempts integer, tenant text, dedupe_key text, enqueued_at timestamp with time zone, eligible_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, last_code text, parent_id bigint, replayed_by bigint) LANGUAGE plpgsql STABLE SET plan_cache_mode TO 'force_custom_plan' SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'off' SET jit TO 'off' SET enable_bitmapscan TO 'off' AS $function$
#variable_conflict use_column
DECLARE
    v_window interval := drainpipe.job_stamp_window();
    v_limit integer := greatest(coalesce(p_limit, 100), 1);
    v_before_id bigint := coalesce(p_before_id, 0);
    v_top bigint;    -- the walk reads the ids below this one (NULL: from the newest)
    v_low bigint;    -- and down to this one (NULL: to the oldest)
    v_chunk integer := 2 * v_limit + 64;
    v_read integer;
    v_last bigint;
    v_bound timestamptz;
    v_newest timestamptz[] := '{}';  -- the stamps of the newest rows for the page so far
BEGIN
    IF p_before_at IS NOT NULL THEN
        -- a row a window newer than the cursor: every row above it is newer than the cursor
        SELECT m.id INTO v_top FROM drainpipe.job_messages m
         WHERE m.id > v_before_id AND m.enqueued_at >= p_before_at + v_window
         ORDER BY m.id LIMIT 1;
    END IF;
    v_low := v_top;
    LOOP
        SELECT count(*)::integer, min(w.id),
               ARRAY(SELECT x FROM unnest(v_newest || array_agg(w.enqueued_at) FILTER (WHERE w.fits)) x
                      ORDER BY x DESC LIMIT v_limit)
          INTO v_read, v_last, v_newest
          FROM (SELECT m.id, m.enqueued_at,
                       (p_queue IS NULL OR m.queue = p_queue)
                       AND (p_before_at IS NULL OR (m.enqueued_at, m.id) < (p_before_at, v_before_id))
                       AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
                       AND (p_state IS NULL
                            OR drainpipe.job_state_at(m.state, m.visible_at, m.attempts,
                                                      m.max_attempts, p_now) = p_state) AS fits
                  FROM drainpipe.job_messages m
                 WHERE v_low IS NULL OR m.id < v_low
                 ORDER BY m.id DESC
                 LIMIT v_chunk) w;
        IF v_read < v_chunk THEN
            v_low := NULL;  -- the oldest row was read
            EXIT;
        END IF;
        v_low := v_last;
        IF cardinality(v_newest) >= v_limit THEN
            SELECT max(l.enqueued_at) INTO v_bound
              FROM (SELECT m.enqueued_at FROM drainpipe.job_messages m
                     WHERE m.id >= v_last ORDER BY m.id LIMIT 16) l;
            EXIT WHEN v_newest[v_limit] >= v_bound + v_window;
            v_chunk := 64 + v_limit / 4;  -- the page is found: only its last window is left
        ELSE
            v_chunk := least(v_chunk * 2, 100000);
        END IF;
    END LOOP;
    -- the page: the rows read, sorted (the tenant read from the payload for these only)
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts,
           drainpipe.job_tenant(s.payload), s.dedupe_key, s.enqueued_at, s.eligible_at,
           s.started_at, s.finished_at, s.last_code, s.parent_id, s.replayed_by
      FROM (
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, s.payload, s.dedupe_key,
           s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END AS eligible_at,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END AS finished_at,
           CASE WHEN s.read_state = s.state THEN s.last_code
                WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS'
                ELSE 'LEASE_EXPIRED' END AS last_code,
           s.parent_id, s.replayed_by
      FROM (
          SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                 m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                 m.parent_id, m.replayed_by, m.payload,
                 drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS read_state
            FROM drainpipe.job_messages m
           WHERE (v_top IS NULL OR m.id < v_top)
             AND (v_low IS NULL OR m.id >= v_low)
             AND (p_queue IS NULL OR m.queue = p_queue)
             AND (p_before_at IS NULL OR (m.enqueued_at, m.id) < (p_before_at, v_before_id))
             AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
             -- a stored state that can read as the one asked for
             AND (p_state IS NULL OR m.state = p_state
                  OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
           ORDER BY m.enqueued_at DESC, m.id DESC
      ) s
     WHERE p_state IS NULL OR s.read_state = p_state
     LIMIT v_limit) s;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL::bigint)
 RETURNS SETOF drainpipe.dead_job_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT d.id, d.attempts, d.enqueued_at, d.finished_at,
           drainpipe.dead_job_message(d.payload, d.max_attempts, d.dedupe_key, d.last_error)
      FROM drainpipe.job_messages d
     WHERE d.queue = p_queue AND d.state = 'dead' AND d.replayed_by IS NULL
       AND (p_before_id IS NULL OR d.id < p_before_id)
     ORDER BY d.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000) $function$;

CREATE OR REPLACE FUNCTION drainpipe.live_job_payloads_v1(p_queue text, p_after bigint, p_limit integer)
 RETURNS TABLE(id bigint, payload jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT m.id, m.payload FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.id > coalesce(p_after, 0) AND m.finished_at IS NULL
     ORDER BY m.id LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000) $function$;

CREATE OR REPLACE FUNCTION drainpipe.live_jobs_by_minute(p_queue text, p_now timestamp with time zone, p_from timestamp with time zone)
 RETURNS TABLE(minute timestamp with time zone, n bigint, queued bigint, leased bigint, retry_wait bigint, dead bigint, ready bigint, oldest timestamp with time zone) LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- job_queue_overview_v1's live jobs, in one pass over their index range, by minute
    -- enqueued since p_from (before it: NULL)
    SELECT CASE WHEN l.enqueued_at >= p_from THEN date_trunc('minute', l.enqueued_at) END,
           count(*),
           count(*) FILTER (WHERE l.state = 'queued'),
           count(*) FILTER (WHERE l.state = 'leased'),
           count(*) FILTER (WHERE l.state = 'retry_wait'),
           count(*) FILTER (WHERE l.state = 'dead'),
           count(*) FILTER (WHERE l.ready),
           min(l.visible_at) FILTER (WHERE l.ready)
      FROM (SELECT m.visible_at, m.enqueued_at,
                   drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS state,
                   m.visible_at <= p_now AND m.attempts < m.max_attempts AS ready
              FROM drainpipe.job_messages m
             WHERE m.queue = p_queue AND m.finished_at IS NULL) l
     GROUP BY 1 $function$;

CREATE OR REPLACE FUNCTION drainpipe.park_job(p_queue text, p_id bigint, p_until timestamp with time zone, p_waiting_for text)
 RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    UPDATE drainpipe.job_messages
       SET state = CASE WHEN p_waiting_for IS NULL THEN 'queued' ELSE 'waiting' END,
           visible_at = p_until,
           max_attempts = max_attempts + 1
     WHERE id = p_id AND queue = p_queue $function$;

CREATE OR REPLACE FUNCTION drainpipe.recount_job_totals_v1(p_queues text[] DEFAULT NULL::text[])
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_total bigint;
BEGIN
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM drainpipe.job_totals;
    INSERT INTO drainpipe.job_totals (queue, state, shard, n)
    SELECT m.queue, m.state, 0, count(*) FROM drainpipe.job_messages m
     WHERE m.finished_at IS NOT NULL GROUP BY 1, 2;
    INSERT INTO drainpipe.job_totals_kept (queue)
    SELECT DISTINCT t.queue FROM drainpipe.job_totals t ON CONFLICT DO NOTHING;
    SELECT coalesce(sum(n), 0) INTO v_total FROM drainpipe.job_totals;
    RETURN v_total;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v3(p_queue text, p_id bigint, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(new_job_id bigint, code text) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_rules record;
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_new bigint;
    v_at timestamptz;
BEGIN
    -- the policy row first (see replay_rules_in_force), then the job
    v_rules := drainpipe.replay_rules_in_force(p_queue, p_window, p_replayable);
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    END IF;
    IF v_job.replayed_by IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_ALREADY_REPLAYED'::text;
        RETURN;
    END IF;
    IF v_job.state = 'leased' AND v_job.visible_at <= v_now AND v_job.attempts >= v_job.max_attempts THEN
        -- dead already, not swept yet
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_job.visible_at, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        UPDATE drainpipe.job_messages
           SET state = 'dead', finished_at = v_job.visible_at, last_code = 'MAX_ATTEMPTS',
               last_error = 'The lease ran out on the last attempt'
         WHERE id = p_id;
    ELSIF v_job.state <> 'dead' THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_DEAD'::text;
        RETURN;
    END IF;
    code := drainpipe.replay_refusal(v_rules.replay_window, v_rules.replayable,
        CASE WHEN v_rules.replay_window IS NULL THEN NULL
             ELSE drainpipe.replay_origin(p_queue, p_id) END, v_now);
    IF code IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, code;
        RETURN;
    END IF;
    IF v_job.dedupe_key IS NULL THEN
        SELECT s.id, s.at INTO v_new, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
        INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at, parent_id)
        OVERRIDING SYSTEM VALUE
        VALUES (v_new, p_queue, v_job.payload, v_job.max_attempts, v_at, clock_timestamp(), p_id);
    ELSE
        v_new := drainpipe.enqueue_keyed_job(p_queue, v_job.payload, 0, v_job.max_attempts,
                                             v_job.dedupe_key, true, p_id);
    END IF;
    UPDATE drainpipe.job_messages SET replayed_by = v_new WHERE id = p_id;
    RETURN QUERY SELECT v_new, NULL::text;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_origin(p_queue text, p_id bigint)
 RETURNS timestamp with time zone LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH RECURSIVE lineage (id, parent_id, enqueued_at, depth) AS (
        SELECT m.id, m.parent_id, m.enqueued_at, 1
          FROM drainpipe.job_messages AS m WHERE m.id = p_id AND m.queue = p_queue
        UNION ALL
        SELECT m.id, m.parent_id, m.enqueued_at, l.depth + 1
          FROM lineage AS l JOIN drainpipe.job_messages AS m
            ON m.id = l.parent_id AND m.queue = p_queue AND m.id < l.id
         WHERE l.depth < 1000
    )
    SELECT min(enqueued_at) FROM lineage $function$;

CREATE OR REPLACE FUNCTION drainpipe.rewrite_job_payload_v1(p_queue text, p_id bigint, p_old jsonb, p_new jsonb)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    UPDATE drainpipe.job_messages SET payload = p_new
     WHERE id = p_id AND queue = p_queue AND payload = p_old AND finished_at IS NULL;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.set_job_parent(p_queue text, p_ids bigint[], p_parent bigint)
 RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    UPDATE drainpipe.job_messages SET parent_id = p_parent WHERE id = ANY (p_ids) AND queue = p_queue $function$;

CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF NOT drainpipe.is_job_code(p_code) THEN
        PERFORM drainpipe.assert_job_code(p_code);
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'succeeded', finished_at = coalesce(p_now, clock_timestamp()), last_code = p_code
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt AND state = 'leased';
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE drainpipe.job_attempts SET late_outcome = 'succeeded'
     WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
       AND outcome = 'cancelled' AND late_outcome IS NULL;
    RETURN false;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.table_job_totals()
 RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_rows jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', -c.n)) INTO v_rows
          FROM (SELECT g.queue, g.state, count(*) AS n FROM gone g
                 WHERE g.finished_at IS NOT NULL GROUP BY 1, 2) c;
    ELSE
        -- a claim or a heartbeat: no row of it is finished, and nothing is written
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', c.n)) INTO v_rows
          FROM (SELECT x.queue, x.state, sum(x.n) AS n
                  FROM (SELECT a.queue, a.state, 1 AS n FROM added a WHERE a.finished_at IS NOT NULL
                        UNION ALL
                        SELECT g.queue, g.state, -1 FROM gone g WHERE g.finished_at IS NOT NULL) x
                 GROUP BY 1, 2
                HAVING sum(x.n) <> 0) c;
    END IF;
    IF v_rows IS NOT NULL THEN
        PERFORM drainpipe.add_job_totals(v_rows);
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_get_job(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, NULL::timestamptz,
           drainpipe.job_tenant(s.payload), s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END, s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.read_code, s.parent_id, s.replayed_by,
           drainpipe.job_history_v1(s.queue, s.id, s.attempts, s.state, s.started_at,
                                    s.finished_at, s.visible_at, s.read_code, s.at)
      FROM (SELECT m.*, r.read_state, c.at,
                   CASE WHEN r.read_state = m.state THEN m.last_code
                        WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
              FROM drainpipe.job_messages m
             CROSS JOIN (SELECT coalesce(p_now, clock_timestamp()) AS at) c
             CROSS JOIN LATERAL (SELECT drainpipe.job_state_at(m.state, m.visible_at, m.attempts,
                                                               m.max_attempts, c.at) AS read_state) r
             WHERE m.id = p_id AND m.queue = p_queue) s $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_list_jobs_2(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by, NULL::jsonb
      FROM drainpipe.job_records_newest(p_queue, p_state, p_tenant, p_limit, p_before_at,
                                        p_before_id, coalesce(p_now, clock_timestamp())) r;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_search_jobs(p_queue text, p_state text, p_tenant text, p_code text, p_since timestamp with time zone, p_until timestamp with time zone, p_dedupe_key text, p_id bigint, p_limit integer, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET plan_cache_mode TO 'force_custom_plan' SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, NULL::timestamptz, s.tenant,
           s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.read_code, s.parent_id, s.replayed_by, NULL::jsonb
      FROM (
          SELECT r.*,
                 CASE WHEN r.read_state = r.state THEN r.last_code
                      WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
            FROM (
                SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                       m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                       m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                       drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, v_now) AS read_state
                  FROM drainpipe.job_messages m
                 WHERE (p_id IS NULL OR m.id = p_id)
                   AND (p_queue IS NULL OR m.queue = p_queue)
                   AND (p_before_id IS NULL OR m.id < p_before_id)
                   AND (p_dedupe_key IS NULL OR m.dedupe_key = p_dedupe_key)
                   AND (p_since IS NULL OR m.enqueued_at >= p_since)
                   AND (p_until IS NULL OR m.enqueued_at < p_until)
                   AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
                   AND (p_state IS NULL OR m.state = p_state
                        OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
                 ORDER BY m.id DESC
            ) r
      ) s
     WHERE (p_state IS NULL OR s.read_state = p_state)
       AND (p_code IS NULL OR s.read_code = p_code
            OR (s.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                AND (SELECT a.code FROM drainpipe.job_attempts a
                      WHERE a.queue = s.queue AND a.job_id = s.id AND a.code IS NOT NULL
                      ORDER BY a.number DESC LIMIT 1) = p_code))
     LIMIT greatest(coalesce(p_limit, 100), 1);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.wake_job(p_queue text, p_id bigint, p_now timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    UPDATE drainpipe.job_messages
       SET state = 'queued', visible_at = least(visible_at, p_now)
     WHERE id = p_id AND queue = p_queue AND state = 'waiting' AND finished_at IS NULL;
    RETURN FOUND;
END $function$;

-- Triggers
CREATE OR REPLACE TRIGGER drainpipe_totals_delete AFTER DELETE ON drainpipe.job_messages REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();
CREATE OR REPLACE TRIGGER drainpipe_totals_update AFTER UPDATE ON drainpipe.job_messages REFERENCING OLD TABLE AS gone NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();

RESET check_function_bodies;
