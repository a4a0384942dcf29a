-- jobs on a plain table, claimed with FOR UPDATE SKIP LOCKED (backend="table").
-- Live jobs stay in job_messages; completed jobs and dead letters move to job_archive,
-- so the claim index only ever covers work that can still run.

CREATE TABLE IF NOT EXISTS drainpipe.job_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL CONSTRAINT job_messages_queue_name CHECK (queue ~ '^[a-z_][a-z0-9_]{0,46}$'),
    -- {payload, max_attempts, dedupe_key?, last_error?}
    message jsonb NOT NULL,
    -- claims so far; 0 = never claimed; the fencing token of complete/fail/extend
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer GENERATED ALWAYS AS (coalesce((message ->> 'max_attempts')::integer, 5)) STORED,
    dedupe_key text GENERATED ALWAYS AS (message ->> 'dedupe_key') STORED,
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

CREATE TABLE IF NOT EXISTS drainpipe.job_archive (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    message jsonb NOT NULL,
    attempts integer NOT NULL,
    enqueued_at timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    dead boolean NOT NULL DEFAULT false
);
ALTER TABLE drainpipe.job_archive ENABLE ROW LEVEL SECURITY;
-- Dead letters newest first (list_dead, retry_dead, stats).
CREATE INDEX IF NOT EXISTS job_archive_dead_idx ON drainpipe.job_archive (queue, id) WHERE dead;
-- purge_job_archive walks old rows of one queue.
CREATE INDEX IF NOT EXISTS job_archive_age_idx ON drainpipe.job_archive (queue, archived_at);

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
    v_message jsonb := drainpipe.job_message(p_payload, p_max_attempts, p_dedupe_key);
    v_id bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
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
    INSERT INTO drainpipe.job_messages (queue, message, visible_at)
    VALUES (p_queue, v_message, clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)))
    RETURNING id INTO v_id;
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
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.job_message('{}', p_max_attempts, NULL);
    RETURN QUERY
    INSERT INTO drainpipe.job_messages (queue, message, visible_at)
    SELECT p_queue,
           jsonb_build_object('payload', e.value, 'max_attempts', p_max_attempts),
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
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz, message jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- A job whose lease ran out on its last attempt is a dead letter, not work to run again.
    WITH exhausted AS (
        DELETE FROM drainpipe.job_messages m
         WHERE m.id IN (
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.attempts >= x.max_attempts AND x.visible_at <= v_now
                FOR UPDATE SKIP LOCKED)
        RETURNING m.*
    )
    INSERT INTO drainpipe.job_archive (id, queue, message, attempts, enqueued_at, archived_at, dead)
    SELECT e.id, e.queue,
           e.message || '{"last_error": "The lease ran out on the last attempt", "dead": true}'::jsonb,
           e.attempts, e.enqueued_at, v_now, true
      FROM exhausted e;

    RETURN QUERY
    WITH picked AS (
        -- oldest visible first; rows another worker is claiming right now are skipped, not waited for
        SELECT j.id FROM drainpipe.job_messages j
         WHERE j.queue = p_queue AND j.visible_at <= v_now AND j.attempts < j.max_attempts
         ORDER BY j.visible_at, j.id
         LIMIT greatest(p_batch, 1)
           FOR UPDATE SKIP LOCKED
    )
    UPDATE drainpipe.job_messages j
       SET attempts = j.attempts + 1,
           visible_at = v_now + make_interval(secs => greatest(p_lease, 0))
      FROM picked
     WHERE j.id = picked.id
    RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.message;
END
$$;

-- Fenced by the attempt counter: a worker whose job was claimed again changes nothing.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs(p_queue text, p_ids bigint[], p_attempts integer[])
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH done AS (
        DELETE FROM drainpipe.job_messages m
         USING unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt
        RETURNING m.*
    )
    INSERT INTO drainpipe.job_archive (id, queue, message, attempts, enqueued_at)
    SELECT d.id, d.queue, d.message, d.attempts, d.enqueued_at FROM done d
    RETURNING id
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
    v_error jsonb := jsonb_build_object('last_error', left(coalesce(p_error, 'null'), 4000));
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.attempts >= v_job.max_attempts THEN
        DELETE FROM drainpipe.job_messages WHERE id = p_id;
        INSERT INTO drainpipe.job_archive (id, queue, message, attempts, enqueued_at, dead)
        VALUES (v_job.id, v_job.queue, v_job.message || v_error || '{"dead": true}', v_job.attempts,
                v_job.enqueued_at, true);
        RETURN 'dead';
    END IF;
    UPDATE drainpipe.job_messages
       SET message = message || v_error,
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
    DELETE FROM drainpipe.job_archive WHERE id = p_id AND queue = p_queue AND dead
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
             + (SELECT count(*) FROM drainpipe.job_archive a WHERE a.queue = q.name AND a.dead),
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
    SELECT a.id, a.attempts, a.enqueued_at, a.archived_at, a.message
      FROM drainpipe.job_archive a
     WHERE a.queue = p_queue AND a.dead AND (p_before_id IS NULL OR a.id < p_before_id)
     ORDER BY a.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000)
$$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.id FROM drainpipe.job_archive a
     WHERE a.queue = p_queue AND a.dead AND (p_ids IS NULL OR a.id = ANY (p_ids))
     ORDER BY a.id DESC
     LIMIT greatest(coalesce(p_batch, 1000), 1)
$$;

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
        DELETE FROM drainpipe.job_archive a
         WHERE a.id IN (
               SELECT x.id FROM drainpipe.job_archive x
                WHERE x.queue = p_queue
                  AND x.archived_at < clock_timestamp() - CASE WHEN x.dead THEN p_dead_older_than ELSE p_older_than END
                ORDER BY x.id
                LIMIT greatest(coalesce(p_batch, 10000), 1))
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone
$$;
