-- rest-api: durable steps over PostgREST (jobs 0016, docs/steps.md). Thin wrappers shaped
-- as 0001's are (plain named arguments, JSON results, service role only): each calls the
-- jobs module's function, which checks the attempt's fence itself.
SELECT set_config('check_function_bodies', 'off', true);

-- [{number, name, state, result}] of a job's recorded steps (trusted code: results)
CREATE OR REPLACE FUNCTION drainpipe_api.load_steps_v1(queue text, id bigint)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('number', s.number, 'name', s.name,
                                                 'state', s.state, 'result', s.result)
                              ORDER BY s.number), '[]'::jsonb)
      FROM drainpipe.job_steps_v1(load_steps_v1.queue, load_steps_v1.id) AS s
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.record_step_v1(
    queue text, id bigint, attempt integer, number integer, name text, state text,
    result jsonb DEFAULT NULL, code text DEFAULT NULL, started_at timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.record_job_step_v1(record_step_v1.queue, record_step_v1.id,
        record_step_v1.attempt, record_step_v1.number, record_step_v1.name, record_step_v1.state,
        record_step_v1.result, record_step_v1.code, record_step_v1.started_at)
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.suspend_v1(
    queue text, id bigint, attempt integer, delay double precision,
    waiting_for text DEFAULT NULL, number integer DEFAULT NULL, name text DEFAULT NULL,
    started_at timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.suspend_job_v1(suspend_v1.queue, suspend_v1.id, suspend_v1.attempt,
        suspend_v1.delay, suspend_v1.waiting_for, suspend_v1.number, suspend_v1.name,
        suspend_v1.started_at)
$$;

-- {outcome, data}
CREATE OR REPLACE FUNCTION drainpipe_api.wait_event_v1(
    queue text, id bigint, attempt integer, event text, key text, timeout double precision,
    number integer, name text, started_at timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('outcome', w.outcome, 'data', w.data)
      FROM drainpipe.wait_job_event_v1(wait_event_v1.queue, wait_event_v1.id,
               wait_event_v1.attempt, wait_event_v1.event, wait_event_v1.key,
               wait_event_v1.timeout, wait_event_v1.number, wait_event_v1.name,
               wait_event_v1.started_at) AS w
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.emit_v1(event text, key text, data jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.emit_event_v1(emit_v1.event, emit_v1.key, emit_v1.data) $$;

-- {outcome, ids}
CREATE OR REPLACE FUNCTION drainpipe_api.spawn_v1(
    queue text, id bigint, attempt integer, number integer, name text, child_queue text,
    payloads jsonb, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5,
    started_at timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('outcome', s.outcome, 'ids', to_jsonb(s.ids))
      FROM drainpipe.spawn_jobs_v1(spawn_v1.queue, spawn_v1.id, spawn_v1.attempt,
               spawn_v1.number, spawn_v1.name, spawn_v1.child_queue, spawn_v1.payloads,
               spawn_v1.delay, spawn_v1.max_attempts, spawn_v1.started_at) AS s
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.join_v1(
    queue text, id bigint, attempt integer, child_queue text, ids bigint[], number integer,
    name text, started_at timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.join_jobs_v1(join_v1.queue, join_v1.id, join_v1.attempt,
        join_v1.child_queue, join_v1.ids, join_v1.number, join_v1.name, join_v1.started_at)
$$;

-- [{id, state, last_code, kept, result}] in the order of ids
CREATE OR REPLACE FUNCTION drainpipe_api.child_outcomes_v1(queue text, ids bigint[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'state', c.state,
               'last_code', c.last_code, 'kept', c.kept, 'result', c.result)), '[]'::jsonb)
      FROM drainpipe.child_outcomes_v1(child_outcomes_v1.queue, child_outcomes_v1.ids) AS c
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.cancel_children_v1(queue text, id bigint)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.cancel_job_children_v1(cancel_children_v1.queue, cancel_children_v1.id) $$;

-- metadata only: {suspensions, last_fence, waiting_for, steps: [...]} or null
CREATE OR REPLACE FUNCTION drainpipe_api.job_workflow_v1(queue text, id bigint)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.job_workflow_v1(job_workflow_v1.queue, job_workflow_v1.id) $$;

-- {kept, result}
CREATE OR REPLACE FUNCTION drainpipe_api.result_v1(queue text, id bigint)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('kept', r.kept, 'result', r.result)
      FROM drainpipe.job_result_v1(result_v1.queue, result_v1.id) AS r
$$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM PUBLIC;
DO $privileges$
DECLARE
    api_role text;
BEGIN
    FOREACH api_role IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = api_role) THEN
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM %I', api_role);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA drainpipe_api TO service_role;
    END IF;
END
$privileges$;
