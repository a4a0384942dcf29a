-- jobs 0016: the step functions, one round trip each, on either storage (hold_job_fence,
-- park_job and wake_job are the storage's). Every write checks the attempt's fence in the
-- same transaction, with the job's row locked, so a holder whose attempt ended (lease
-- taken over, cancelled, suspended) never records a step.

-- Records step p_number of a job: 'recorded'; 'exists' when a step with that number and
-- name is recorded already (done); 'mismatch' when one with another name is; 'lost' when
-- p_attempt does not hold the job. A failed step is overwritten by a later run's record.
CREATE OR REPLACE FUNCTION drainpipe.record_job_step_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_number integer,
    p_name text,
    p_state text,
    p_result jsonb,
    p_code text DEFAULT NULL,
    p_started_at timestamptz DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_name text;
BEGIN
    IF p_state NOT IN ('done', 'failed') THEN
        RAISE EXCEPTION 'step state must be done or failed' USING ERRCODE = '22023';
    END IF;
    IF p_number IS NULL OR p_number < 0 OR p_name IS NULL OR length(p_name) = 0 OR length(p_name) > 200 THEN
        RAISE EXCEPTION 'a step needs a number >= 0 and a name of 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, code, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, p_state,
            CASE WHEN p_state = 'done' THEN p_result END,
            CASE WHEN drainpipe.is_job_code(p_code) THEN p_code END,
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, code = excluded.code,
           started_at = excluded.started_at, ended_at = excluded.ended_at
     WHERE s.state = 'failed' AND s.name = excluded.name;
    IF FOUND THEN
        RETURN 'recorded';
    END IF;
    SELECT s.name INTO v_name FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
    RETURN CASE WHEN v_name = p_name THEN 'exists' ELSE 'mismatch' END;
END
$$;

-- Suspends the run held by p_attempt: records step p_number (when given: a sleep's
-- marker) and makes the job eligible again p_delay seconds from now, waiting for
-- p_waiting_for ('time'; NULL: nothing, it reads queued). The lease is released in the
-- same statement. 'suspended', 'mismatch' (another step has that number) or 'lost'.
CREATE OR REPLACE FUNCTION drainpipe.suspend_job_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_delay double precision,
    p_waiting_for text DEFAULT NULL,
    p_number integer DEFAULT NULL,
    p_name text DEFAULT NULL,
    p_started_at timestamptz DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_until timestamptz := v_now + make_interval(secs => greatest(coalesce(p_delay, 0), 0));
    v_name text;
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    IF p_number IS NOT NULL THEN
        INSERT INTO drainpipe.job_steps (queue, job_id, number, name, state, result, started_at, ended_at)
        VALUES (p_queue, p_id, p_number, p_name, 'done', jsonb_build_object('until', v_until),
                coalesce(p_started_at, v_now), v_now)
        ON CONFLICT (queue, job_id, number) DO NOTHING;
        IF NOT FOUND THEN
            SELECT s.name INTO v_name FROM drainpipe.job_steps s
             WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
            IF v_name IS DISTINCT FROM p_name THEN
                RETURN 'mismatch';
            END IF;
        END IF;
    END IF;
    INSERT INTO drainpipe.job_workflows AS w (queue, job_id, suspensions, last_fence, waiting_for, updated_at)
    VALUES (p_queue, p_id, 1, p_attempt, p_waiting_for, v_now)
    ON CONFLICT (queue, job_id) DO UPDATE
       SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
           waiting_for = excluded.waiting_for,
           wait_number = NULL, wait_event = NULL, wait_key = NULL, wait_deadline = NULL,
           updated_at = v_now;
    PERFORM drainpipe.park_job(p_queue, p_id, v_until, p_waiting_for);
    RETURN 'suspended';
END
$$;

-- Wait p_number of the run held by p_attempt, for event p_event with key p_key: takes the
-- oldest matching event emitted since the job was enqueued that this job has not taken
-- yet ('taken', its data, recorded as the step); else, once the wait's deadline passed,
-- 'timeout' (recorded, no data); else suspends the job until an emit or the deadline
-- ('suspended'). 'lost' when p_attempt does not hold the job. The deadline is fixed by the
-- wait's first call (p_timeout seconds; NULL: none).
CREATE OR REPLACE FUNCTION drainpipe.wait_job_event_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_event text,
    p_key text,
    p_timeout double precision,
    p_number integer,
    p_name text,
    p_started_at timestamptz DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (outcome text, data jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_enqueued timestamptz;
    v_event_id bigint;
    v_data jsonb;
    v_deadline timestamptz;
BEGIN
    PERFORM drainpipe.assert_event_name(p_event, p_key);
    -- the event lock before the job's row, as emit takes them: no deadlock between the two
    PERFORM drainpipe.lock_job_event(p_event, p_key);
    v_enqueued := drainpipe.hold_job_fence(p_queue, p_id, p_attempt);
    IF v_enqueued IS NULL THEN
        RETURN QUERY SELECT 'lost'::text, NULL::jsonb;
        RETURN;
    END IF;
    SELECT e.id, e.data INTO v_event_id, v_data
      FROM drainpipe.job_events e
     WHERE e.name = p_event AND e.key = p_key AND e.emitted_at >= v_enqueued
       AND NOT EXISTS (SELECT 1 FROM drainpipe.job_steps s
                        WHERE s.queue = p_queue AND s.job_id = p_id AND s.event_id = e.id)
     ORDER BY e.id
     LIMIT 1;
    SELECT w.wait_deadline INTO v_deadline FROM drainpipe.job_workflows w
     WHERE w.queue = p_queue AND w.job_id = p_id AND w.wait_number = p_number;
    IF NOT FOUND THEN
        v_deadline := v_now + make_interval(secs => p_timeout);  -- NULL without a timeout
    END IF;
    IF v_event_id IS NOT NULL OR v_deadline <= v_now THEN
        INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, event_id, started_at, ended_at)
        VALUES (p_queue, p_id, p_number, p_name, 'done',
                jsonb_build_object('data', v_data, 'timeout', v_event_id IS NULL), v_event_id,
                coalesce(p_started_at, v_now), v_now)
        ON CONFLICT (queue, job_id, number) DO UPDATE
           SET state = excluded.state, result = excluded.result, event_id = excluded.event_id,
               ended_at = excluded.ended_at
         WHERE s.state = 'failed' AND s.name = excluded.name;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'mismatch'::text, NULL::jsonb;
            RETURN;
        END IF;
        UPDATE drainpipe.job_workflows
           SET waiting_for = NULL, wait_number = NULL, wait_event = NULL, wait_key = NULL,
               wait_deadline = NULL, updated_at = v_now
         WHERE queue = p_queue AND job_id = p_id AND wait_number IS NOT NULL;
        RETURN QUERY SELECT CASE WHEN v_event_id IS NULL THEN 'timeout' ELSE 'taken' END, v_data;
        RETURN;
    END IF;
    INSERT INTO drainpipe.job_workflows AS w
           (queue, job_id, suspensions, last_fence, waiting_for, wait_number, wait_event, wait_key,
            wait_deadline, updated_at)
    VALUES (p_queue, p_id, 1, p_attempt, 'event:' || p_event, p_number, p_event, p_key, v_deadline, v_now)
    ON CONFLICT (queue, job_id) DO UPDATE
       SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
           waiting_for = excluded.waiting_for,
           wait_number = excluded.wait_number, wait_event = excluded.wait_event,
           wait_key = excluded.wait_key, wait_deadline = excluded.wait_deadline,
           updated_at = v_now;
    -- without a timeout the job is eligible only when an emit wakes it (a century is "never"
    -- that a timestamp can still carry to every client)
    PERFORM drainpipe.park_job(p_queue, p_id, coalesce(v_deadline, v_now + interval '100 years'),
                               'event:' || p_event);
    RETURN QUERY SELECT 'suspended'::text, NULL::jsonb;
END
$$;

-- Stores an event and wakes every job waiting on its name and key; its id.
CREATE OR REPLACE FUNCTION drainpipe.emit_event_v1(
    p_event text,
    p_key text,
    p_data jsonb DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_id bigint;
    v_waiter record;
BEGIN
    PERFORM drainpipe.assert_event_name(p_event, p_key);
    PERFORM drainpipe.lock_job_event(p_event, p_key);
    INSERT INTO drainpipe.job_events (name, key, data, emitted_at)
    VALUES (p_event, p_key, p_data, v_now)
    RETURNING id INTO v_id;
    FOR v_waiter IN
        SELECT w.queue, w.job_id FROM drainpipe.job_workflows w
         WHERE w.wait_event = p_event AND w.wait_key = p_key
         ORDER BY w.queue, w.job_id
    LOOP
        PERFORM drainpipe.wake_job(v_waiter.queue, v_waiter.job_id, v_now);
        UPDATE drainpipe.job_workflows
           SET waiting_for = NULL, wait_event = NULL, wait_key = NULL, updated_at = v_now
         WHERE queue = v_waiter.queue AND job_id = v_waiter.job_id;
    END LOOP;
    RETURN v_id;
END
$$;

-- A job's recorded steps with their stored results, for the handler's replay (trusted
-- code only: the records functions never return results).
CREATE OR REPLACE FUNCTION drainpipe.job_steps_v1(p_queue text, p_id bigint)
RETURNS TABLE (number integer, name text, state text, result jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.number, s.name, s.state, s.result FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number > 0
     ORDER BY s.number
$$;

-- A job's steps as metadata (no results), what it waits for and its suspensions: what a
-- record shows of its workflow. NULL when the job never recorded a step or suspended.
CREATE OR REPLACE FUNCTION drainpipe.job_workflow_v1(p_queue text, p_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN w.job_id IS NULL AND s.steps IS NULL THEN NULL ELSE jsonb_build_object(
               'suspensions', coalesce(w.suspensions, 0),
               'last_fence', w.last_fence,
               'waiting_for', w.waiting_for,
               'steps', coalesce(s.steps, '[]'::jsonb)) END
      FROM (SELECT 1) one
      LEFT JOIN drainpipe.job_workflows w ON w.queue = p_queue AND w.job_id = p_id
      LEFT JOIN LATERAL (
          SELECT jsonb_agg(jsonb_build_object(
                     'number', x.number, 'name', x.name, 'state', x.state,
                     'started_at', x.started_at, 'ended_at', x.ended_at, 'code', x.code)
                   ORDER BY x.number) AS steps
            FROM drainpipe.job_steps x
           WHERE x.queue = p_queue AND x.job_id = p_id AND x.number > 0
      ) s ON true
$$;

-- The handler's kept return value: (true, value), or (false, NULL) when none was kept.
CREATE OR REPLACE FUNCTION drainpipe.job_result_v1(p_queue text, p_id bigint)
RETURNS TABLE (kept boolean, result jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(s.*) > 0, (array_agg(s.result))[1] FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = 0
$$;

-- Deletes events older than p_older_than seconds (event_retention); how many.
CREATE OR REPLACE FUNCTION drainpipe.purge_job_events_v1(
    p_older_than double precision DEFAULT 604800,
    p_now timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM drainpipe.job_events
         WHERE emitted_at < coalesce(p_now, clock_timestamp()) - make_interval(secs => p_older_than)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
