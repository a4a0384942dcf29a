-- jobs on a plain table, claimed with FOR UPDATE SKIP LOCKED (backend="table").
-- Live jobs stay in job_messages. A completed job is deleted: nothing in the API reads
-- completed jobs, and a plain DELETE keeps completion as cheap as a hand-written queue's.
-- Dead letters move to job_dead_letters, where they wait to be listed, replayed or purged.

CREATE TABLE IF NOT EXISTS drainpipe.job_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- checked by the functions that write it (assert_queue_name), not by a CHECK
    -- constraint: Postgres would run its regular expression again on every claim's UPDATE
    queue text NOT NULL,
    -- the payload, or the context envelope around it (see context.py); a column of its
    -- own, so a claim returns it without taking it out of a wrapping document
    payload jsonb NOT NULL,
    -- claims so far; 0 = never claimed; the fencing token of complete/fail/extend
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 5,
    dedupe_key text,
    -- the error of the last failed attempt
    last_error text,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- claimable from: the delay end, the lease end or the backoff end
    visible_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.job_messages ENABLE ROW LEVEL SECURITY;

-- The claim reads this index in order: only rows that may still run are in it.
CREATE INDEX IF NOT EXISTS job_messages_ready_idx
    ON drainpipe.job_messages (queue, visible_at, id) WHERE attempts < max_attempts;
-- Rows whose lease ran out on their last attempt: swept into the archive by the next claim.
CREATE INDEX IF NOT EXISTS job_messages_exhausted_idx
    ON drainpipe.job_messages (queue, visible_at) WHERE attempts >= max_attempts;
-- At most one never-claimed job per key: the backstop of dedupe="waiting"/"always".
CREATE UNIQUE INDEX IF NOT EXISTS job_messages_waiting_dedupe_idx
    ON drainpipe.job_messages (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND attempts = 0;
-- Dedupe lookups of running jobs ("always" coalesces onto them too).
CREATE INDEX IF NOT EXISTS job_messages_dedupe_idx
    ON drainpipe.job_messages (queue, dedupe_key) WHERE dedupe_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS drainpipe.job_dead_letters (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    -- {payload, max_attempts, dedupe_key?, last_error, dead: true} (see dead_job_message)
    message jsonb NOT NULL,
    attempts integer NOT NULL,
    enqueued_at timestamptz NOT NULL,
    died_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.job_dead_letters ENABLE ROW LEVEL SECURITY;
-- newest first per queue (list_dead, retry_dead, stats)
CREATE INDEX IF NOT EXISTS job_dead_letters_queue_idx ON drainpipe.job_dead_letters (queue, id);
-- purge by age; rows arrive in time order, so BRIN is enough
CREATE INDEX IF NOT EXISTS job_dead_letters_died_brin ON drainpipe.job_dead_letters USING brin (died_at);

-- Upgrades from the first layout: generated max_attempts/dedupe_key columns become plain
-- ones (values kept), and dead letters move out of the old job_archive table.
DO $upgrade$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
                WHERE table_schema = 'drainpipe' AND table_name = 'job_messages'
                  AND column_name = 'max_attempts' AND is_generated = 'ALWAYS') THEN
        ALTER TABLE drainpipe.job_messages ALTER COLUMN max_attempts DROP EXPRESSION;
        ALTER TABLE drainpipe.job_messages ALTER COLUMN max_attempts SET DEFAULT 5;
        ALTER TABLE drainpipe.job_messages ALTER COLUMN max_attempts SET NOT NULL;
        ALTER TABLE drainpipe.job_messages ALTER COLUMN dedupe_key DROP EXPRESSION;
    END IF;
    IF to_regclass('drainpipe.job_archive') IS NOT NULL THEN
        INSERT INTO drainpipe.job_dead_letters (id, queue, message, attempts, enqueued_at, died_at)
        SELECT id, queue, message, attempts, enqueued_at, archived_at
          FROM drainpipe.job_archive WHERE dead
        ON CONFLICT (id) DO NOTHING;
        DROP TABLE drainpipe.job_archive;
    END IF;
    -- The second layout kept {payload, max_attempts, dedupe_key, last_error} in one
    -- "message" document: the payload and the last error move to columns of their own.
    IF EXISTS (SELECT 1 FROM information_schema.columns
                WHERE table_schema = 'drainpipe' AND table_name = 'job_messages'
                  AND column_name = 'message') THEN
        ALTER TABLE drainpipe.job_messages ADD COLUMN IF NOT EXISTS payload jsonb,
                                           ADD COLUMN IF NOT EXISTS last_error text;
        UPDATE drainpipe.job_messages
           SET payload = coalesce(message -> 'payload', '{}'::jsonb),
               last_error = message ->> 'last_error';
        ALTER TABLE drainpipe.job_messages ALTER COLUMN payload SET NOT NULL;
        ALTER TABLE drainpipe.job_messages DROP COLUMN message;
    END IF;
END
$upgrade$;

-- The first layouts checked queue names with a constraint; see the queue column.
ALTER TABLE drainpipe.job_messages DROP CONSTRAINT IF EXISTS job_messages_queue_name;

-- A dead letter's document (the shape both backends list, replay and purge).
CREATE OR REPLACE FUNCTION drainpipe.dead_job_message(
    p_payload jsonb, p_max_attempts integer, p_dedupe_key text, p_last_error text
)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('payload', p_payload, 'max_attempts', p_max_attempts,
                              'last_error', p_last_error, 'dead', true)
           || CASE WHEN p_dedupe_key IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('dedupe_key', p_dedupe_key) END
$$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job(
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
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF p_dedupe_key IS NOT NULL THEN
        -- one enqueuer per (queue, key) at a time, so two callers cannot both miss each other
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.job:' || p_queue), hashtext(p_dedupe_key));
        SELECT m.id INTO v_id
          FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key
           AND (p_dedupe_running OR m.attempts = 0)
           -- a job whose last lease ran out is dead already, whatever the sweep says
           AND NOT (m.attempts >= m.max_attempts AND m.visible_at <= clock_timestamp())
         ORDER BY m.id
         LIMIT 1;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    IF p_dedupe_key IS NULL THEN
        -- the common case stays a plain INSERT: ON CONFLICT's speculative insertion costs
        -- WAL and time on every row
        INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, visible_at)
        VALUES (p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts,
                clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)))
        RETURNING id INTO v_id;
        RETURN v_id;
    END IF;
    INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, dedupe_key, visible_at)
    VALUES (p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, p_dedupe_key,
            clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)))
    -- The lock above makes a clash impossible under READ COMMITTED. A caller's REPEATABLE
    -- READ transaction may not see a waiting job committed after its snapshot: DO NOTHING
    -- then fails with 40001 (kind "serialization", retry), not a unique violation.
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND attempts = 0 DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT m.id INTO v_id FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key AND m.attempts = 0;
    END IF;
    RETURN v_id;
END
$$;

-- Many jobs in one round trip (no dedupe keys); ids come back in payload order.
CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs(
    p_queue text,
    p_payloads jsonb,
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    RETURN QUERY
    INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, visible_at)
    SELECT p_queue, e.value, p_max_attempts,
           clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0))
      FROM jsonb_array_elements(p_payloads) WITH ORDINALITY AS e(value, n)
     ORDER BY e.n
    RETURNING id;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
               payload jsonb, max_attempts integer, last_error text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The plan cache would keep choosing custom plans here (the generic one's LIMIT $n looks
-- dear), planning anew on every claim; the generic plan is the same index walk
-- (tests/test_query_plan.py checks it) and saves that planning. A session keeps that plan,
-- so it must not depend on the table's size when it was made: a plan cached while the
-- queue was empty would otherwise scan the whole table once it has grown (until an
-- ANALYZE). These functions only ever reach rows through an index, hence no seqscans.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
    -- computed once here: inside the UPDATE it would be computed again for every row
    v_until timestamptz := v_now + make_interval(secs => greatest(p_lease, 0));
    v_batch integer := greatest(p_batch, 1);
BEGIN
    -- A job whose lease ran out on its last attempt is a dead letter, not work to run again.
    WITH exhausted AS (
        -- = ANY(ARRAY(...)) keeps this a primary-key lookup per row; "IN (subquery)" was
        -- planned as a hash semi join over the whole table
        DELETE FROM drainpipe.job_messages m
         WHERE m.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.attempts >= x.max_attempts AND x.visible_at <= v_now
                FOR UPDATE SKIP LOCKED))
        RETURNING m.*
    )
    INSERT INTO drainpipe.job_dead_letters (id, queue, message, attempts, enqueued_at, died_at)
    SELECT e.id, e.queue,
           drainpipe.dead_job_message(e.payload, e.max_attempts, e.dedupe_key,
                                      'The lease ran out on the last attempt'),
           e.attempts, e.enqueued_at, v_now
      FROM exhausted e;

    RETURN QUERY
    UPDATE drainpipe.job_messages j
       SET attempts = j.attempts + 1,
           visible_at = v_until
     -- = ANY (ARRAY(...)): primary-key lookups even under a generic plan (which guesses
     -- LIMIT $n at 10% of the table). A subquery, not a CTE: the CTE's extra materialising
     -- step cost measurably more per claimed job.
     WHERE j.id = ANY (ARRAY(
           -- oldest visible first; rows another worker is claiming right now are skipped
           SELECT x.id FROM drainpipe.job_messages x
            WHERE x.queue = p_queue AND x.visible_at <= v_now AND x.attempts < x.max_attempts
            ORDER BY x.visible_at, x.id
            LIMIT v_batch
              FOR UPDATE SKIP LOCKED))
    RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.payload, j.max_attempts, j.last_error;
END
$$;

-- Fenced by the attempt counter: a worker whose job was claimed again changes nothing.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs(p_queue text, p_ids bigint[], p_attempts integer[])
RETURNS SETOF bigint
-- plpgsql, not sql: its plan is cached per session instead of made on every call
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    -- a join on (id, attempt): one primary-key lookup per pair, and the attempt is the fence
    DELETE FROM drainpipe.job_messages m
     USING unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue
    RETURNING m.id;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.complete_job(p_queue text, p_id bigint, p_attempt integer)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs(p_queue, ARRAY[p_id], ARRAY[p_attempt]))
$$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job drainpipe.job_messages;
    v_error text := left(coalesce(p_error, 'null'), 4000);
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.attempts >= v_job.max_attempts THEN
        DELETE FROM drainpipe.job_messages WHERE id = p_id;
        INSERT INTO drainpipe.job_dead_letters (id, queue, message, attempts, enqueued_at)
        VALUES (v_job.id, v_job.queue,
                drainpipe.dead_job_message(v_job.payload, v_job.max_attempts, v_job.dedupe_key, v_error),
                v_job.attempts, v_job.enqueued_at);
        RETURN 'dead';
    END IF;
    UPDATE drainpipe.job_messages
       SET last_error = v_error,
           visible_at = clock_timestamp() + make_interval(
               secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_job.attempts)), 0))
     WHERE id = p_id;
    RETURN 'queued';
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision
)
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE drainpipe.job_messages m
       SET visible_at = clock_timestamp() + make_interval(secs => greatest(p_lease, 0))
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt
    RETURNING m.id
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease(
    p_queue text, p_id bigint, p_attempt integer, p_lease double precision
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease))
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job(p_queue text, p_id bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_message jsonb;
BEGIN
    DELETE FROM drainpipe.job_dead_letters WHERE id = p_id AND queue = p_queue
    RETURNING message INTO v_message;
    IF v_message IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN drainpipe.enqueue_job(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats(p_queues text[])
RETURNS TABLE (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
               oldest_age_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.name,
           coalesce(live.ready, 0),
           coalesce(live.in_flight, 0),
           coalesce(live.delayed, 0),
           coalesce(live.exhausted, 0)
             + (SELECT count(*) FROM drainpipe.job_dead_letters d WHERE d.queue = q.name),
           extract(epoch FROM clock_timestamp() - live.oldest)::double precision
      FROM unnest(p_queues) AS q(name)
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts < m.max_attempts) AS ready,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts > 0) AS in_flight,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts = 0) AS delayed,
                 count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts) AS exhausted,
                 min(m.enqueued_at) FILTER (WHERE NOT (m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts)) AS oldest
            FROM drainpipe.job_messages m
           WHERE m.queue = q.name
      ) live ON true
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs(
    p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, died_at timestamptz, message jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id, d.attempts, d.enqueued_at, d.died_at, d.message
      FROM drainpipe.job_dead_letters d
     WHERE d.queue = p_queue AND (p_before_id IS NULL OR d.id < p_before_id)
     ORDER BY d.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000)
$$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id FROM drainpipe.job_dead_letters d
     WHERE d.queue = p_queue AND (p_ids IS NULL OR d.id = ANY (p_ids))
     ORDER BY d.id DESC
     LIMIT greatest(coalesce(p_batch, 1000), 1)
$$;

-- Completed jobs are not kept on this backend, so only dead letters older than
-- p_dead_older_than are purged; p_older_than is accepted for the shared signature.
CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive(
    p_queue text,
    p_older_than interval DEFAULT '7 days',
    p_batch integer DEFAULT 10000,
    p_dead_older_than interval DEFAULT '30 days'
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM drainpipe.job_dead_letters d
         WHERE d.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_dead_letters x
                WHERE x.queue = p_queue AND x.died_at < clock_timestamp() - p_dead_older_than
                ORDER BY x.id
                LIMIT greatest(coalesce(p_batch, 10000), 1)))
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;
