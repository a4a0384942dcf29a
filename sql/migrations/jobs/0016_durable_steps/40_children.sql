-- jobs 0016: child jobs. job.spawn is a step: the children are enqueued and the step
-- recorded in one fenced transaction, so they are enqueued exactly once. job.join checks
-- the children in one call: all finished → recorded as a step; else the parent suspends,
-- waiting for "children", and looks again later (every 2, 4 ... 60 s: children finishing
-- do not touch their parent, so the claim and the completion stay as they are).

-- 'recorded' with the new ids, 'exists' with the ids recorded by an earlier run, or
-- 'mismatch' / 'lost' (no ids).
CREATE OR REPLACE FUNCTION drainpipe.spawn_jobs_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_number integer,
    p_name text,
    p_child_queue text,
    p_payloads jsonb,
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5,
    p_started_at timestamptz DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (outcome text, ids bigint[])
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_step drainpipe.job_steps;
    v_ids bigint[];
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN QUERY SELECT 'lost'::text, NULL::bigint[];
        RETURN;
    END IF;
    SELECT * INTO v_step FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
    IF FOUND AND v_step.name IS DISTINCT FROM p_name THEN
        RETURN QUERY SELECT 'mismatch'::text, NULL::bigint[];
        RETURN;
    ELSIF FOUND AND v_step.state = 'done' THEN
        RETURN QUERY SELECT 'exists'::text,
            ARRAY(SELECT jsonb_array_elements_text(v_step.result -> 'ids')::bigint);
        RETURN;
    END IF;
    v_ids := ARRAY(SELECT drainpipe.enqueue_jobs_v1(p_child_queue, p_payloads, p_delay, p_max_attempts));
    PERFORM drainpipe.set_job_parent(p_child_queue, v_ids, p_id);
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, 'done',
            jsonb_build_object('queue', p_child_queue, 'ids', to_jsonb(v_ids)),
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, ended_at = excluded.ended_at;
    RETURN QUERY SELECT 'recorded'::text, v_ids;
END
$$;

-- The children's outcomes, in the order of p_ids: state ('live' while not finished),
-- last_code, and each one's kept result (trusted code only).
CREATE OR REPLACE FUNCTION drainpipe.child_outcomes_v1(p_queue text, p_ids bigint[])
RETURNS TABLE (id bigint, state text, last_code text, kept boolean, result jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.id, c.state, c.last_code, r.job_id IS NOT NULL, r.result
      FROM drainpipe.child_job_states(p_queue, p_ids) AS c
      LEFT JOIN drainpipe.job_steps r ON r.queue = p_queue AND r.job_id = c.id AND r.number = 0
$$;

-- Join p_number of the run held by p_attempt: 'done' (every child finished; recorded as a
-- step), 'suspended' (the parent waits for "children" and looks again later), 'mismatch'
-- or 'lost'.
CREATE OR REPLACE FUNCTION drainpipe.join_jobs_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_child_queue text,
    p_ids bigint[],
    p_number integer,
    p_name text,
    p_started_at timestamptz DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_suspensions integer;
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.child_job_states(p_child_queue, p_ids) c WHERE c.state = 'live') THEN
        INSERT INTO drainpipe.job_workflows AS w (queue, job_id, suspensions, last_fence, waiting_for, updated_at)
        VALUES (p_queue, p_id, 1, p_attempt, 'children', v_now)
        ON CONFLICT (queue, job_id) DO UPDATE
           SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
               waiting_for = 'children', wait_number = NULL, wait_event = NULL, wait_key = NULL,
               wait_deadline = NULL, updated_at = v_now
        RETURNING w.suspensions INTO v_suspensions;
        PERFORM drainpipe.park_job(p_queue, p_id,
            v_now + make_interval(secs => least(60, 2 ^ least(v_suspensions, 6))), 'children');
        RETURN 'suspended';
    END IF;
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, 'done',
            jsonb_build_object('queue', p_child_queue, 'ids', to_jsonb(p_ids)),
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, ended_at = excluded.ended_at
     WHERE s.state = 'failed' AND s.name = excluded.name;
    IF NOT FOUND THEN
        RETURN 'mismatch';
    END IF;
    UPDATE drainpipe.job_workflows SET waiting_for = NULL, updated_at = v_now
     WHERE queue = p_queue AND job_id = p_id;
    RETURN 'done';
END
$$;

-- Cancels the live children of a job (those its spawn steps enqueued); how many.
CREATE OR REPLACE FUNCTION drainpipe.cancel_job_children_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_child record;
    v_count integer := 0;
BEGIN
    FOR v_child IN
        SELECT s.result ->> 'queue' AS queue, jsonb_array_elements_text(s.result -> 'ids')::bigint AS id
          FROM drainpipe.job_steps s
         WHERE s.queue = p_queue AND s.job_id = p_id AND s.name LIKE 'spawn:%' AND s.state = 'done'
    LOOP
        IF drainpipe.cancel_job_v1(v_child.queue, v_child.id, p_now) = 'cancelled' THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;
