-- jobs 0020: a join looks at its children again after a delay that grows with the time
-- this join has waited (half of it, 2 s to 60 s), not with every suspension the job ever had.
-- 0016 took 2^suspensions seconds: a workflow that slept or gave up its turn a few times
-- before its join rechecked its children only once a minute from the first wait on.
-- Same signature and answers as 0016's join_jobs_v1.

-- when the pending wait began (a join's first suspension at its step number); NULL otherwise
ALTER TABLE drainpipe.job_workflows ADD COLUMN IF NOT EXISTS waiting_since timestamptz;

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
    v_since timestamptz;
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.child_job_states(p_child_queue, p_ids) c WHERE c.state = 'live') THEN
        INSERT INTO drainpipe.job_workflows AS w
               (queue, job_id, suspensions, last_fence, waiting_for, wait_number, waiting_since, updated_at)
        VALUES (p_queue, p_id, 1, p_attempt, 'children', p_number, v_now, v_now)
        ON CONFLICT (queue, job_id) DO UPDATE
           SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
               waiting_for = 'children', wait_number = excluded.wait_number,
               wait_event = NULL, wait_key = NULL, wait_deadline = NULL,
               -- the same join waiting again keeps its start; any other wait starts now
               waiting_since = CASE
                   WHEN w.waiting_for = 'children' AND w.wait_number = excluded.wait_number
                   THEN coalesce(w.waiting_since, v_now) ELSE v_now END,
               updated_at = v_now
        RETURNING w.waiting_since INTO v_since;
        PERFORM drainpipe.park_job(p_queue, p_id,
            v_now + make_interval(secs => least(60, greatest(2,
                extract(epoch FROM v_now - v_since)::double precision / 2))), 'children');
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
    UPDATE drainpipe.job_workflows
       SET waiting_for = NULL, wait_number = NULL, waiting_since = NULL, updated_at = v_now
     WHERE queue = p_queue AND job_id = p_id;
    RETURN 'done';
END
$$;
