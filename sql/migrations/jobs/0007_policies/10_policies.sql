-- jobs: queue policies (docs/reference.md section 9), read by triggers on the job storage so every
-- writer obeys them (Python, SQL, a trigger calling enqueue_job_v1, PostgREST).
-- Refusals raise SQLSTATE DPQ01 payload too large, DPQ02 queue full, DPQ03 lease too
-- long, DPQ04 scheduled too far ahead; clients map them to the contract's kinds and codes.

CREATE TABLE IF NOT EXISTS drainpipe.queue_policies (
    queue text PRIMARY KEY,
    max_payload_bytes integer NOT NULL CHECK (max_payload_bytes > 0),
    max_pending integer NOT NULL CHECK (max_pending > 0),
    lease double precision NOT NULL CHECK (lease > 0),
    max_lease double precision NOT NULL CHECK (max_lease >= lease),
    max_delay double precision NOT NULL CHECK (max_delay > 0),
    max_attempts integer NOT NULL CHECK (max_attempts > 0),
    attempt_window double precision CHECK (attempt_window > 0),
    retention double precision NOT NULL CHECK (retention > 0),
    encrypt boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.queue_policies ENABLE ROW LEVEL SECURITY;

-- An upper bound of the live jobs of each policy queue: raised by every insert, never
-- lowered by a completion (so claims and completions pay nothing), and set to the exact
-- count, probed through at most max_pending + 1 rows, only when it would pass the cap
-- (once per max_pending enqueues in steady state; at each refusal when the queue is full).
-- The row lock the raise takes makes concurrent enqueuers wait for each other, and the
-- recount runs under it: the cap is never overshot.
CREATE TABLE IF NOT EXISTS drainpipe.queue_pending (
    queue text PRIMARY KEY,
    live bigint NOT NULL DEFAULT 0
);
ALTER TABLE drainpipe.queue_pending ENABLE ROW LEVEL SECURITY;

-- When retention last ran: the drain route runs it at most once per interval, and the
-- row lock of the update that claims a run keeps two routes from running it at once.
CREATE TABLE IF NOT EXISTS drainpipe.job_retention_runs (
    id integer PRIMARY KEY CHECK (id = 1),
    last_run timestamptz
);
ALTER TABLE drainpipe.job_retention_runs ENABLE ROW LEVEL SECURITY;
INSERT INTO drainpipe.job_retention_runs (id, last_run) VALUES (1, NULL) ON CONFLICT (id) DO NOTHING;

-- The size the database measures: a clear payload's text form (without the context
-- envelope), or a sealed payload's ciphertext. jsonb's text form spaces what compact JSON
-- does not (at most 1.5 times as long, for an array of digits), and a ciphertext is base64
-- (4/3) of the payload with its actor and tenant, so the database allows that much more:
-- it catches writers that ignore the limit, while the client's check is the exact one.
CREATE OR REPLACE FUNCTION drainpipe.policy_payload_limit(p_policy drainpipe.queue_policies)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_policy.encrypt
                THEN ((p_policy.max_payload_bytes + 1024) * 4 / 3)::bigint + 64
                ELSE (p_policy.max_payload_bytes * 3 / 2)::bigint END
$$;

-- What policy_payload_limit is compared with, for one stored value.
CREATE OR REPLACE FUNCTION drainpipe.policy_payload_size(p_stored jsonb)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN jsonb_typeof(p_stored) <> 'object' OR NOT p_stored ? '$dp' THEN octet_length(p_stored::text)
        WHEN p_stored ? 'sealed' THEN octet_length(p_stored ->> 'sealed')
        WHEN p_stored ? 'payload' THEN octet_length((p_stored -> 'payload')::text)
        ELSE octet_length(p_stored::text) END
$$;

-- Checks one statement's new jobs of one queue against its policy and counts them.
CREATE OR REPLACE FUNCTION drainpipe.check_policy_insert(
    p_queue text, p_added bigint, p_largest bigint, p_latest timestamptz
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    v_policy drainpipe.queue_policies;
    v_live bigint;
BEGIN
    SELECT * INTO v_policy FROM drainpipe.queue_policies WHERE queue = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_largest > drainpipe.policy_payload_limit(v_policy) THEN
        RAISE EXCEPTION 'payload is % bytes as stored, more than queue "%" allows (max_payload_bytes %)',
            p_largest, p_queue, v_policy.max_payload_bytes USING ERRCODE = 'DPQ01';
    END IF;
    -- a second of slack: the client computed the delay a moment before the insert
    IF p_latest > clock_timestamp() + make_interval(secs => v_policy.max_delay + 1) THEN
        RAISE EXCEPTION 'the job would run more than % s ahead, past queue "%"''s max_delay',
            v_policy.max_delay, p_queue USING ERRCODE = 'DPQ04';
    END IF;
    UPDATE drainpipe.queue_pending SET live = live + p_added WHERE queue = p_queue
    RETURNING live INTO v_live;
    IF v_live > v_policy.max_pending THEN
        -- our own new rows included (this transaction sees them)
        v_live := drainpipe.count_live_jobs(p_queue, v_policy.max_pending + 1);
        UPDATE drainpipe.queue_pending SET live = v_live WHERE queue = p_queue;
        IF v_live > v_policy.max_pending THEN
            RAISE EXCEPTION 'queue "%" already holds its max_pending of % live jobs',
                p_queue, v_policy.max_pending USING ERRCODE = 'DPQ02';
        END IF;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.drop_queue_policy_v1(p_queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM drainpipe.queue_pending WHERE queue = p_queue;
    DELETE FROM drainpipe.queue_policies WHERE queue = p_queue;
    RETURN FOUND;
END
$$;
