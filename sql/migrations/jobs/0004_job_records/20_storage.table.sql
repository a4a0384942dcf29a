-- jobs 0004 on the plain table: the row stays after it finishes. state says where it is
-- (queued, leased, retry_wait, succeeded, dead, cancelled); finished_at is set exactly when
-- the state is terminal, and the claim's indexes cover unfinished rows only. Dead letters
-- are rows with state = 'dead' (job_dead_letters is emptied into job_messages below).
-- Every _v1 function the previous release calls is replaced here with the same signature,
-- so its code keeps working on the new shape during a rolling deploy.

ALTER TABLE drainpipe.job_messages
    ADD COLUMN IF NOT EXISTS state text NOT NULL DEFAULT 'queued',
    -- when the latest attempt started (claim time)
    ADD COLUMN IF NOT EXISTS started_at timestamptz,
    ADD COLUMN IF NOT EXISTS finished_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_code text,
    ADD COLUMN IF NOT EXISTS parent_id bigint,
    ADD COLUMN IF NOT EXISTS replayed_by bigint;

DO $upgrade$
BEGIN
    -- rows claimed before this release: leased (a stored retry_wait cannot be told apart;
    -- the state read at its backoff's end is the same)
    UPDATE drainpipe.job_messages SET state = 'leased' WHERE attempts > 0 AND state = 'queued';
    -- dead letters become rows of their own kind
    IF to_regclass('drainpipe.job_dead_letters') IS NOT NULL THEN
        INSERT INTO drainpipe.job_messages
               (id, queue, payload, attempts, max_attempts, dedupe_key, last_error, enqueued_at,
                visible_at, state, finished_at, last_code)
        OVERRIDING SYSTEM VALUE
        SELECT d.id, d.queue, coalesce(d.message -> 'payload', '{}'::jsonb), d.attempts,
               coalesce((d.message ->> 'max_attempts')::integer, 5), d.message ->> 'dedupe_key',
               d.message ->> 'last_error', d.enqueued_at, d.died_at, 'dead', d.died_at,
               'MAX_ATTEMPTS'
          FROM drainpipe.job_dead_letters d
        ON CONFLICT (id) DO NOTHING;
        DELETE FROM drainpipe.job_dead_letters;
    END IF;
END
$upgrade$;

-- The claim walks this in order: unfinished rows only (succeeded rows stay out of its way).
CREATE INDEX IF NOT EXISTS job_messages_live_idx
    ON drainpipe.job_messages (queue, visible_at, id) WHERE finished_at IS NULL;
-- Leases that ran out on the last attempt: swept to dead by the next claim.
CREATE INDEX IF NOT EXISTS job_messages_exhausted_live_idx
    ON drainpipe.job_messages (queue, visible_at)
    WHERE finished_at IS NULL AND attempts >= max_attempts;
CREATE UNIQUE INDEX IF NOT EXISTS job_messages_waiting_key_idx
    ON drainpipe.job_messages (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND attempts = 0 AND finished_at IS NULL;
CREATE INDEX IF NOT EXISTS job_messages_live_key_idx
    ON drainpipe.job_messages (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;
-- Finished rows by age (purge) and by state (stats, covering).
CREATE INDEX IF NOT EXISTS job_messages_finished_idx
    ON drainpipe.job_messages (queue, finished_at) INCLUDE (state) WHERE finished_at IS NOT NULL;
-- Dead letters not replayed yet, newest first (list_dead, retry_dead, stats).
CREATE INDEX IF NOT EXISTS job_messages_dead_idx
    ON drainpipe.job_messages (queue, id) WHERE state = 'dead' AND replayed_by IS NULL;
DROP INDEX IF EXISTS drainpipe.job_messages_ready_idx;
DROP INDEX IF EXISTS drainpipe.job_messages_exhausted_idx;
DROP INDEX IF EXISTS drainpipe.job_messages_waiting_dedupe_idx;
DROP INDEX IF EXISTS drainpipe.job_messages_dedupe_idx;

-- -- enqueue ------------------------------------------------------------------------------

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
    IF p_dedupe_key IS NULL THEN
        -- the common case stays a plain INSERT
        INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, visible_at)
        VALUES (p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts,
                clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)))
        RETURNING id INTO v_id;
        RETURN v_id;
    END IF;
    RETURN drainpipe.enqueue_keyed_job(p_queue, p_payload, p_delay, p_max_attempts,
                                       p_dedupe_key, p_dedupe_running, NULL);
END
$$;

-- A job with a dedupe key (enqueue, replay): the live job with the key when there is one
-- (only a never-claimed one unless p_dedupe_running), else a new row with p_parent_id.
CREATE OR REPLACE FUNCTION drainpipe.enqueue_keyed_job(
    p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer,
    p_dedupe_key text, p_dedupe_running boolean, p_parent_id bigint
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
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
    INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, dedupe_key, visible_at, parent_id)
    VALUES (p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, p_dedupe_key,
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
END
$$;

-- -- claim --------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_row_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- generic plan, no seqscans: see 0002 (the plan must not depend on the table's size)
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_until timestamptz := v_now + make_interval(secs => greatest(p_lease, 0));
    v_batch integer := greatest(p_batch, 1);
    v_ids bigint[];
    v_lapsed boolean;
BEGIN
    -- A job whose lease ran out on its last attempt is dead: its attempt expired.
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

    -- The pick is a statement of its own, into arrays: the take-over record below is then
    -- a branch taken only when a lapsed lease was picked. As a data-modifying CTE of the
    -- claim's UPDATE it cost every claim a quarter of its server CPU (measured: 5
    -- connections claiming 20,000 jobs, ~31 against ~25 µs a job), expired leases or not.
    SELECT array_agg(p.id), bool_or(p.state = 'leased')
      INTO v_ids, v_lapsed
      FROM (
          -- oldest visible first; rows another worker is claiming right now are skipped
          SELECT x.id, x.state
            FROM drainpipe.job_messages x
           WHERE x.queue = p_queue AND x.finished_at IS NULL AND x.visible_at <= v_now
             AND x.attempts < x.max_attempts
           ORDER BY x.visible_at, x.id
           LIMIT v_batch
             FOR UPDATE SKIP LOCKED
      ) p;
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
    RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.payload, j.max_attempts, j.last_error;
END
$$;

-- -- settle -------------------------------------------------------------------------------

-- Fenced by the attempt and the state: only the holder of a live lease completes. A holder
-- whose attempt was cancelled changes nothing but that attempt's late_outcome.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_done integer;
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET state = 'succeeded', finished_at = v_now, last_code = NULL
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue AND m.state = 'leased'
    RETURNING m.id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_ids) THEN
        UPDATE drainpipe.job_attempts a
           SET late_outcome = 'succeeded'
          FROM unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE a.queue = p_queue AND a.job_id = f.id AND a.number = f.attempt
           AND a.outcome = 'cancelled' AND a.late_outcome IS NULL;
    END IF;
END
$$;

-- Skip: the attempt succeeded on purpose without doing its work; last_code says why.
CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- A failed attempt with its code (HANDLER_ERROR when p_code is no valid code); p_discard:
-- dead now, whatever attempts are left. 'queued', 'dead', or NULL when not held.
CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL,
    p_code text DEFAULT NULL,
    p_discard boolean DEFAULT false,
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
END
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
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, p_retry_in, 'HANDLER_ERROR', false, p_now) $$;

-- The heartbeat: only a live lease is extended (a cancelled job's holder learns it here).
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
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt AND m.state = 'leased'
    RETURNING m.id;
END
$$;

-- -- cancel and replay (single functions: the management API wraps them with its audit) --

-- 'cancelled': the job will not run again (a running attempt is fenced at once);
-- 'terminal': it had finished already; NULL: no such job.
CREATE OR REPLACE FUNCTION drainpipe.cancel_job_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- A dead job enqueued again as its child (same payload, dedupe key, max_attempts;
-- parent_id); the parent stays dead and gets replayed_by. NULL unless a dead job that was
-- not replayed yet. With a dedupe key held by a live job, that job is the replay.
CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v2(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_new bigint;
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND OR v_job.replayed_by IS NOT NULL THEN
        RETURN NULL;
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
        RETURN NULL;
    END IF;
    IF v_job.dedupe_key IS NULL THEN
        INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, visible_at, parent_id)
        VALUES (p_queue, v_job.payload, v_job.max_attempts, clock_timestamp(), p_id)
        RETURNING id INTO v_new;
    ELSE
        v_new := drainpipe.enqueue_keyed_job(p_queue, v_job.payload, 0, v_job.max_attempts,
                                             v_job.dedupe_key, true, p_id);
    END IF;
    UPDATE drainpipe.job_messages SET replayed_by = v_new WHERE id = p_id;
    RETURN v_new;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v1(p_queue text, p_id bigint)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.replay_dead_job_v2(p_queue, p_id, NULL) $$;

-- retry_dead_jobs_v1 (30_jobs_tail) walks these: dead jobs not replayed yet.
CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.id FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.state = 'dead' AND m.replayed_by IS NULL
       AND (p_ids IS NULL OR m.id = ANY (p_ids))
     ORDER BY m.id DESC
     LIMIT greatest(coalesce(p_batch, 1000), 1)
$$;

-- -- records ------------------------------------------------------------------------------

-- The rows both read: what each state means at p_now, from the stored columns.
CREATE OR REPLACE FUNCTION drainpipe.job_records_at(
    p_queue text, p_state text, p_tenant text, p_limit integer, p_before_id bigint,
    p_id bigint, p_now timestamptz
)
RETURNS TABLE (id bigint, queue text, state text, stored_state text, attempts integer,
               max_attempts integer, tenant text, dedupe_key text, enqueued_at timestamptz,
               eligible_at timestamptz, started_at timestamptz, finished_at timestamptz,
               lease_end timestamptz, last_code text, parent_id bigint, replayed_by bigint,
               now timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.id, s.queue, s.read_state, s.state, s.attempts, s.max_attempts, s.tenant,
           s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.visible_at,
           CASE WHEN s.read_state = s.state THEN s.last_code
                WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS'
                ELSE 'LEASE_EXPIRED' END,
           s.parent_id, s.replayed_by, p_now
      FROM (
          SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                 m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                 m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                 drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS read_state
            FROM drainpipe.job_messages m
           WHERE (p_id IS NULL OR m.id = p_id)
             AND (p_queue IS NULL OR m.queue = p_queue)
             AND (p_before_id IS NULL OR m.id < p_before_id)
             AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
             -- a stored state that can read as the one asked for
             AND (p_state IS NULL OR m.state = p_state
                  OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
           ORDER BY m.id DESC
      ) s
     WHERE p_state IS NULL OR s.read_state = p_state
     LIMIT greatest(coalesce(p_limit, 100), 1)
$$;

CREATE OR REPLACE FUNCTION drainpipe.get_job_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by,
           drainpipe.job_history_v1(r.queue, r.id, r.attempts, r.stored_state, r.started_at,
                                    r.finished_at, r.lease_end, r.last_code, r.now)
      FROM drainpipe.job_records_at(p_queue, NULL::text, NULL::text, 1, NULL::bigint, p_id, coalesce(p_now, clock_timestamp())) r
$$;

-- Newest first (id descending), ids below p_before_id; p_state filters on the state read
-- at p_now. Metadata only: the payload column is read for the tenant, never returned.
CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v1(
    p_queue text DEFAULT NULL,
    p_state text DEFAULT NULL,
    p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_before_id bigint DEFAULT NULL,
    p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by, NULL::jsonb
      FROM drainpipe.job_records_at(p_queue, p_state, p_tenant, p_limit, p_before_id, NULL::bigint,
                                    coalesce(p_now, clock_timestamp())) r
$$;

-- -- stats, dead letters, purge -----------------------------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v2
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
      ) done ON true
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v1(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.oldest_age_seconds
      FROM drainpipe.job_queue_stats_v2(p_queues) s
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(
    p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL
)
RETURNS SETOF drainpipe.dead_job_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.id, d.attempts, d.enqueued_at, d.finished_at,
           drainpipe.dead_job_message(d.payload, d.max_attempts, d.dedupe_key, d.last_error)
      FROM drainpipe.job_messages d
     WHERE d.queue = p_queue AND d.state = 'dead' AND d.replayed_by IS NULL
       AND (p_before_id IS NULL OR d.id < p_before_id)
     ORDER BY d.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000)
$$;

-- Finished jobs past their age: succeeded and cancelled ones after p_older_than, dead ones
-- after p_dead_older_than; their attempt rows go with them. Live jobs are never touched.
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
        DELETE FROM drainpipe.job_messages d
         WHERE d.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NOT NULL
                  AND x.finished_at < clock_timestamp() - least(p_older_than, p_dead_older_than)
                  AND x.finished_at < clock_timestamp()
                      - CASE WHEN x.state = 'dead' THEN p_dead_older_than ELSE p_older_than END
                ORDER BY x.finished_at
                LIMIT greatest(coalesce(p_batch, 10000), 1)))
        RETURNING d.queue, d.id
    ), attempts_gone AS (
        DELETE FROM drainpipe.job_attempts a USING gone g
         WHERE a.queue = g.queue AND a.job_id = g.id
    )
    SELECT count(*)::integer FROM gone
$$;

-- Release 0's unversioned functions, while they exist (until the contract step drops them),
-- go through the _v1 ones: their own bodies assumed completed jobs are deleted.
DO $release_0$
DECLARE
    v_wrapper record;
BEGIN
    FOR v_wrapper IN SELECT * FROM (VALUES
        ('drainpipe.enqueue_job(text, jsonb, double precision, integer, text, boolean)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.enqueue_job(p_queue text, p_payload jsonb DEFAULT '{}',
               p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5,
               p_dedupe_key text DEFAULT NULL, p_dedupe_running boolean DEFAULT true)
            RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.enqueue_job_v1(p_queue, p_payload, p_delay, p_max_attempts,
                                                  p_dedupe_key, p_dedupe_running) $$$w$),
        ('drainpipe.enqueue_jobs(text, jsonb, double precision, integer)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs(p_queue text, p_payloads jsonb,
               p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5)
            RETURNS SETOF bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.enqueue_jobs_v1(p_queue, p_payloads, p_delay, p_max_attempts) $$$w$),
        ('drainpipe.claim_jobs(text, double precision, integer)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.claim_jobs(p_queue text,
               p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1)
            RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
                           payload jsonb, max_attempts integer, last_error text)
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ BEGIN RETURN QUERY SELECT * FROM drainpipe.claim_jobs_v1(p_queue, p_lease, p_batch); END $$$w$),
        ('drainpipe.complete_jobs(text, bigint[], integer[])',
         $w$CREATE OR REPLACE FUNCTION drainpipe.complete_jobs(p_queue text, p_ids bigint[], p_attempts integer[])
            RETURNS SETOF bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.complete_jobs_v1(p_queue, p_ids, p_attempts) $$$w$),
        ('drainpipe.complete_job(text, bigint, integer)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.complete_job(p_queue text, p_id bigint, p_attempt integer)
            RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.complete_job_v1(p_queue, p_id, p_attempt) $$$w$),
        ('drainpipe.fail_job(text, bigint, integer, text, double precision)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.fail_job(p_queue text, p_id bigint, p_attempt integer,
               p_error text, p_retry_in double precision DEFAULT NULL)
            RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.fail_job_v1(p_queue, p_id, p_attempt, p_error, p_retry_in) $$$w$),
        ('drainpipe.extend_job_lease(text, bigint, integer, double precision)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease(p_queue text, p_id bigint,
               p_attempt integer, p_lease double precision)
            RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.extend_job_lease_v1(p_queue, p_id, p_attempt, p_lease) $$$w$),
        ('drainpipe.replay_dead_job(text, bigint)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job(p_queue text, p_id bigint)
            RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.replay_dead_job_v2(p_queue, p_id) $$$w$),
        ('drainpipe.job_queue_stats(text[])',
         $w$CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats(p_queues text[])
            RETURNS TABLE (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
                           oldest_age_seconds double precision)
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT * FROM drainpipe.job_queue_stats_v1(p_queues) $$$w$),
        ('drainpipe.list_dead_jobs(text, integer, bigint)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs(p_queue text,
               p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL)
            RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, died_at timestamptz, message jsonb)
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT * FROM drainpipe.list_dead_jobs_v1(p_queue, p_max_rows, p_before_id) $$$w$),
        ('drainpipe.purge_job_archive(text, interval, integer, interval)',
         $w$CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive(p_queue text,
               p_older_than interval DEFAULT '7 days', p_batch integer DEFAULT 10000,
               p_dead_older_than interval DEFAULT '30 days')
            RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            AS $$ SELECT drainpipe.purge_job_archive_v1(p_queue, p_older_than, p_batch, p_dead_older_than) $$$w$)
    ) AS w(signature, definition) LOOP
        IF to_regprocedure(v_wrapper.signature) IS NOT NULL THEN
            EXECUTE v_wrapper.definition;
        END IF;
    END LOOP;
END
$release_0$;
