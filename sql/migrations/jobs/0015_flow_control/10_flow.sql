-- jobs 0015: flow control in the claim (docs/flow-control.md, docs/reference.md section 14).
--
-- A queue's limits are a row of queue_flow, stored by ensure_queue_policy_v3 (the policy's
-- concurrency, key_concurrency, rate, key_rate, ordered); a queue without limits has no
-- row, and its claim pays one primary-key probe to learn it (as it does for a pause).
-- A limited claim takes a transaction-level advisory lock on its queue, so two claimers of
-- one limited queue count what is leased one after the other, never both before either
-- took its jobs: no instant has more than the limit leased, whatever the number of
-- claimers. The lock is held to the claim's commit, a millisecond or so.
--
-- A job's flow key (job_key) is metadata of its stored envelope: "key" when the enqueuer
-- gave one, else the tenant of its context, else none (a job without a key is a group of
-- its own). It stays in clear on an encrypted queue, as the tenant does.

CREATE TABLE IF NOT EXISTS drainpipe.queue_flow (
    queue text PRIMARY KEY,
    -- at most this many leased jobs of the queue at any instant (NULL: no limit)
    concurrency integer CHECK (concurrency > 0),
    -- at most this many leased jobs per key
    key_concurrency integer CHECK (key_concurrency > 0),
    -- at most rate_count claims in any rate_per seconds, for the queue and per key
    rate_count integer CHECK (rate_count > 0),
    rate_per double precision CHECK (rate_per > 0),
    key_rate_count integer CHECK (key_rate_count > 0),
    key_rate_per double precision CHECK (key_rate_per > 0),
    -- one job of a key at a time, in enqueue (id) order
    ordered boolean NOT NULL DEFAULT false,
    CHECK ((rate_count IS NULL) = (rate_per IS NULL)),
    CHECK ((key_rate_count IS NULL) = (key_rate_per IS NULL))
);
ALTER TABLE drainpipe.queue_flow ENABLE ROW LEVEL SECURITY;

-- The claims of rate-limited queues (one row per attempt started), kept for the longest
-- window of the queue and pruned by the claims themselves. A rate is a sliding window:
-- a claim at t takes at most count minus the claims in (t - per, t], so every interval
-- of per seconds holds at most count claims.
CREATE TABLE IF NOT EXISTS drainpipe.flow_claims (
    queue text NOT NULL,
    key text,
    claimed_at timestamptz NOT NULL
);
ALTER TABLE drainpipe.flow_claims ENABLE ROW LEVEL SECURITY;
-- the queue's window (rate) and the pruning
CREATE INDEX IF NOT EXISTS flow_claims_queue_idx ON drainpipe.flow_claims (queue, claimed_at);
-- one key's window (key_rate)
CREATE INDEX IF NOT EXISTS flow_claims_key_idx ON drainpipe.flow_claims (queue, key, claimed_at)
    WHERE key IS NOT NULL;

-- The flow key of a stored value (see the header). IMMUTABLE: indexes use it.
CREATE OR REPLACE FUNCTION drainpipe.job_key(p_stored jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}'
                THEN coalesce(p_stored ->> 'key', p_stored #>> '{context,tenant}') END
$$;

-- The claim order's priority of a stored value: -100..100, 0 when none was given.
CREATE OR REPLACE FUNCTION drainpipe.job_priority(p_stored jsonb)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}' AND jsonb_typeof(p_stored -> 'priority') = 'number'
                THEN greatest(-100, least(100, (p_stored ->> 'priority')::numeric::integer))
                ELSE 0 END
$$;

-- Stores (or, all NULL and not ordered, removes) the flow limits of p_queue. Called by
-- ensure_queue_policy_v3; the storage's ensure_flow_indexes builds what the limits read.
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(
    p_queue text, p_concurrency integer, p_key_concurrency integer,
    p_rate_count integer, p_rate_per double precision,
    p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_concurrency IS NULL AND p_key_concurrency IS NULL AND p_rate_count IS NULL
       AND p_key_rate_count IS NULL AND NOT coalesce(p_ordered, false) THEN
        DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;
        RETURN;
    END IF;
    PERFORM drainpipe.ensure_flow_indexes(p_queue);
    INSERT INTO drainpipe.queue_flow AS f (queue, concurrency, key_concurrency, rate_count,
                                           rate_per, key_rate_count, key_rate_per, ordered)
    VALUES (p_queue, p_concurrency, p_key_concurrency, p_rate_count, p_rate_per,
            p_key_rate_count, p_key_rate_per, coalesce(p_ordered, false))
    ON CONFLICT (queue) DO UPDATE
       SET concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
           rate_count = excluded.rate_count, rate_per = excluded.rate_per,
           key_rate_count = excluded.key_rate_count, key_rate_per = excluded.key_rate_per,
           ordered = excluded.ordered;
END
$$;

-- ensure_queue_policy_v2 plus the flow limits (v2 stays for the previous release: it leaves
-- the limits as they are).
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v3(
    p_queue text, p_max_payload_bytes integer, p_max_pending integer,
    p_lease double precision, p_max_lease double precision, p_max_delay double precision,
    p_max_attempts integer, p_attempt_window double precision, p_retention double precision,
    p_encrypt boolean, p_replay_window double precision, p_replayable boolean,
    p_concurrency integer DEFAULT NULL, p_key_concurrency integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_per double precision DEFAULT NULL,
    p_key_rate_count integer DEFAULT NULL, p_key_rate_per double precision DEFAULT NULL,
    p_ordered boolean DEFAULT false
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.ensure_queue_policy_v2(p_queue, p_max_payload_bytes, p_max_pending,
        p_lease, p_max_lease, p_max_delay, p_max_attempts, p_attempt_window, p_retention,
        p_encrypt, p_replay_window, p_replayable);
    PERFORM drainpipe.ensure_queue_flow_v1(p_queue, p_concurrency, p_key_concurrency,
        p_rate_count, p_rate_per, p_key_rate_count, p_key_rate_per, p_ordered);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.drop_queue_policy_v1(p_queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM drainpipe.queue_pending WHERE queue = p_queue;
    DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;  -- jobs 0015
    DELETE FROM drainpipe.queue_policies WHERE queue = p_queue;
    RETURN FOUND;
END
$$;

-- How many of a limited claim's v_room may be taken at p_now under the queue-wide limits
-- (concurrency: p_leased is what the storage counted as leased; rate: the window's claims).
CREATE OR REPLACE FUNCTION drainpipe.flow_room(
    p_flow drainpipe.queue_flow, p_batch integer, p_leased bigint, p_now timestamptz
)
RETURNS integer
-- plpgsql, not sql: its statement's plan is cached per session. No SET clause: it runs
-- under its callers', the claim functions (a SET clause costs every call a save/restore).
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_room bigint := p_batch;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        v_room := least(v_room, p_flow.concurrency - p_leased);
    END IF;
    IF p_flow.rate_count IS NOT NULL AND v_room > 0 THEN
        v_room := least(v_room, p_flow.rate_count - (
            SELECT count(*) FROM drainpipe.flow_claims c
             WHERE c.queue = p_flow.queue
               AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per)));
    END IF;
    RETURN greatest(v_room, 0)::integer;
END
$$;

-- The flow lock of a claim of p_batch on p_flow's queue, where p_leased is what the caller
-- counted as leased before taking it. Returns how many leases claims in flight beside
-- this one may still add (the caller counts again after this, and adds it): 0 when it
-- holds the queue's flow lock alone. A concurrency far from binding (at least 2 x 8 x 100
-- places free, batches of at most 100, no other limit) need not serialise its claims:
-- they hold the lock shared and one of 8 slots, so at most 8 are in flight, each taking
-- at most 100, and each leaves room for the 7 others. Any other claim holds the lock
-- exclusively, so it waits for those in flight to commit and counts exactly.
CREATE OR REPLACE FUNCTION drainpipe.flow_gate(
    p_flow drainpipe.queue_flow, p_batch integer, p_leased bigint
)
RETURNS integer
LANGUAGE plpgsql  -- under its callers' settings, as flow_room
AS $$
DECLARE
    c_slots constant integer := 8;
    c_cap constant integer := 100;
    v_slot integer;
BEGIN
    IF p_flow.concurrency IS NOT NULL AND p_flow.rate_count IS NULL
       AND p_flow.key_concurrency IS NULL AND p_flow.key_rate_count IS NULL AND NOT p_flow.ordered
       AND p_batch <= c_cap AND p_leased + 2 * c_slots * c_cap <= p_flow.concurrency THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
        FOR v_slot IN 0 .. c_slots - 1 LOOP
            IF pg_try_advisory_xact_lock(hashtext('drainpipe.flow.slot:' || p_flow.queue), v_slot) THEN
                RETURN (c_slots - 1) * c_cap;
            END IF;
        END LOOP;
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow.slot:' || p_flow.queue),
                                      pg_backend_pid() % c_slots);
        RETURN (c_slots - 1) * c_cap;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    RETURN 0;
END
$$;

-- Records a limited claim's attempts for the rate windows, and forgets the claims no window
-- of the queue can see any more. A no-op for a queue without a rate.
CREATE OR REPLACE FUNCTION drainpipe.flow_record_claims(
    p_flow drainpipe.queue_flow, p_keys text[], p_now timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_flow.rate_count IS NULL AND p_flow.key_rate_count IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM drainpipe.flow_claims c
     WHERE c.queue = p_flow.queue
       AND c.claimed_at <= p_now - make_interval(
               secs => greatest(coalesce(p_flow.rate_per, 0), coalesce(p_flow.key_rate_per, 0)));
    INSERT INTO drainpipe.flow_claims (queue, key, claimed_at)
    SELECT p_flow.queue, k, p_now FROM unnest(p_keys) AS k;
END
$$;

-- Debounce and throttle (enqueue(..., key=, debounce= / throttle=)): the job each (queue,
-- key) last accepted through them, and when. One row per key; the enqueue that reads it
-- holds an advisory lock on (queue, key), so two enqueues of one key are ordered.
CREATE TABLE IF NOT EXISTS drainpipe.flow_enqueues (
    queue text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    accepted_at timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
ALTER TABLE drainpipe.flow_enqueues ENABLE ROW LEVEL SECURITY;

-- A debounced or throttled enqueue; the job's id. Throttle: within p_throttle seconds of
-- the key's last accepted enqueue (whatever that job's state since), that job's id and
-- nothing stored. Debounce: the key's last debounced job, while it is still queued (never
-- claimed), gets p_payload and becomes eligible p_debounce seconds from now; else a new job
-- eligible then. The storage's debounce_job rewrites the queued job; enqueue_job_v1 stores
-- a new one (so queue policies apply as to any enqueue).
CREATE OR REPLACE FUNCTION drainpipe.enqueue_flow_job_v1(
    p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer,
    p_dedupe_key text, p_dedupe_running boolean, p_key text,
    p_debounce double precision, p_throttle double precision
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_at timestamptz;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_key IS NULL OR (p_debounce IS NULL) = (p_throttle IS NULL)
       OR coalesce(p_debounce, p_throttle) <= 0 THEN
        RAISE EXCEPTION 'debounce or throttle (one, positive) needs a key'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow_enqueue:' || p_queue), hashtext(p_key));
    SELECT e.job_id, e.accepted_at INTO v_id, v_at
      FROM drainpipe.flow_enqueues e WHERE e.queue = p_queue AND e.key = p_key;
    IF p_throttle IS NOT NULL THEN
        IF v_id IS NOT NULL AND v_at > v_now - make_interval(secs => p_throttle) THEN
            RETURN v_id;
        END IF;
        v_id := drainpipe.enqueue_job_v1(p_queue, p_payload, p_delay, p_max_attempts,
                                         p_dedupe_key, p_dedupe_running);
    ELSE
        IF v_id IS NOT NULL AND drainpipe.debounce_job(p_queue, v_id, p_payload, p_debounce) THEN
            RETURN v_id;
        END IF;
        v_id := drainpipe.enqueue_job_v1(p_queue, p_payload, p_debounce, p_max_attempts,
                                         p_dedupe_key, p_dedupe_running);
    END IF;
    INSERT INTO drainpipe.flow_enqueues AS e (queue, key, job_id, accepted_at)
    VALUES (p_queue, p_key, v_id, v_now)
    ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, accepted_at = excluded.accepted_at;
    RETURN v_id;
END
$$;
