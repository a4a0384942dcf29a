-- jobs v1 on the plain table (backend="table"). Same storage as release 0 (0001); the
-- functions gain the _v1 suffix, return the declared row types, and take p_now (the
-- current time; NULL = the server clock) at the end of the transition functions.

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

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_row_v1
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
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
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
-- p_now is accepted for the signature both backends share: this backend deletes a
-- completed job and records no time.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamptz DEFAULT NULL
)
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

CREATE OR REPLACE FUNCTION drainpipe.complete_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_now))
$$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_job drainpipe.job_messages;
    v_error text := left(coalesce(p_error, 'null'), 4000);
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.attempts >= v_job.max_attempts THEN
        DELETE FROM drainpipe.job_messages WHERE id = p_id;
        INSERT INTO drainpipe.job_dead_letters (id, queue, message, attempts, enqueued_at, died_at)
        VALUES (v_job.id, v_job.queue,
                drainpipe.dead_job_message(v_job.payload, v_job.max_attempts, v_job.dedupe_key, v_error),
                v_job.attempts, v_job.enqueued_at, v_now);
        RETURN 'dead';
    END IF;
    UPDATE drainpipe.job_messages
       SET last_error = v_error,
           visible_at = v_now + make_interval(
               secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_job.attempts)), 0))
     WHERE id = p_id;
    RETURN 'queued';
END
$$;

-- The heartbeat. plpgsql with the claim's plan settings: as a LANGUAGE sql function it was
-- planned without them, and Postgres 18 chose a Seq Scan for the join on a grown table.
CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_until timestamptz := coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(p_lease, 0));
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET visible_at = v_until
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt
    RETURNING m.id;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease_v1(
    p_queue text, p_id bigint, p_attempt integer, p_lease double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease, p_now))
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v1(p_queue text, p_id bigint)
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
    RETURN drainpipe.enqueue_job_v1(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v1(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v1
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

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(
    p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL
)
RETURNS SETOF drainpipe.dead_job_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id, d.attempts, d.enqueued_at, d.died_at, d.message
      FROM drainpipe.job_dead_letters d
     WHERE d.queue = p_queue AND (p_before_id IS NULL OR d.id < p_before_id)
     ORDER BY d.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000)
$$;

-- Completed jobs are not kept on this backend, so only dead letters older than
-- p_dead_older_than are purged; p_older_than is accepted for the shared signature.
CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive_v1(
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

-- Release 0's heartbeat, still called by that release's code during a rolling deploy, was
-- the LANGUAGE sql function that Postgres 18 planned with a Seq Scan: it now goes through
-- extend_job_leases_v1 and its plan settings (same signature; 0003 drops it).
CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision
)
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.extend_job_leases_v1(p_queue, p_ids, p_attempts, p_lease) $$;
