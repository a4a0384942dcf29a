-- The table: ids and stamps drawn together (10_stamps.sql), the listing on the primary key,
-- and 0010's index on (enqueued_at, id) dropped: every claim and settle paid an entry in it.
--
-- Rows written before this migration were stamped by the column default, read right after
-- the id was drawn in the same row: the same order, without the check on the first read.

-- -- enqueue: signatures, checks and results as 0002/0004 --------------------------------

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

-- -- replay: 0011's, the new job's id and stamp drawn as an enqueue's ---------------------

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v3(
    p_queue text, p_id bigint, p_window double precision DEFAULT NULL,
    p_replayable boolean DEFAULT true, p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (new_job_id bigint, code text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- -- the listing --------------------------------------------------------------------------

-- 0010's job_records_newest (same arguments, rows and order), read on the primary key. The
-- walk goes down the ids in growing chunks; it may stop once the page's last row is a
-- stamp window newer than the newest of the lowest 16 rows read (any one of them stamped
-- as 10_stamps.sql says bounds every row below; 16 so that a stamp moved back by hand,
-- as a test of an age rule does, does not stop it early). Then the rows read are sorted.
CREATE OR REPLACE FUNCTION drainpipe.job_records_newest(
    p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamptz,
    p_before_id bigint, p_now timestamptz
)
RETURNS TABLE (id bigint, queue text, state text, attempts integer, max_attempts integer,
               tenant text, dedupe_key text, enqueued_at timestamptz, eligible_at timestamptz,
               started_at timestamptz, finished_at timestamptz, last_code text,
               parent_id bigint, replayed_by bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode TO 'force_custom_plan'
SET search_path = pg_catalog, pg_temp
-- the primary key read in order, whatever the statistics say (see pgmq_newest_window)
SET enable_seqscan = off
-- (the cost of a path turned off is not a reason to compile the query)
SET jit = off
SET enable_bitmapscan = off
AS $$
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
END
$$;

-- 0010's index: nothing reads it now. (A plain DROP INDEX waits for the table's readers
-- and writers for a moment; DROP INDEX CONCURRENTLY it by hand first if that matters.)
DROP INDEX IF EXISTS drainpipe.job_messages_enqueued_idx;
