-- rest-api: job records (docs/reference.md §8) over PostgREST: get, list, cancel, replay with lineage,
-- the coded settlements (Skip, Discard, a failure's code) and stats with the terminal
-- counts. Thin wrappers over the jobs module's 0004_job_records functions, shaped as 0001's
-- are (plain named arguments, JSON results, service role only). 0001's functions stay:
-- code of the previous release calls stats_v1 and replay_v1 during a rolling deploy.
SELECT set_config('check_function_bodies', 'off', true);

-- {queue: {ready, in_flight, delayed, dead, succeeded, cancelled, oldest_age_seconds}}
CREATE OR REPLACE FUNCTION drainpipe_api.stats_v2(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
               jsonb_object_agg(s.queue, jsonb_build_object(
                   'ready', s.ready, 'in_flight', s.in_flight, 'delayed', s.delayed,
                   'dead', s.dead, 'succeeded', s.succeeded, 'cancelled', s.cancelled,
                   'oldest_age_seconds', s.oldest_age_seconds)),
               '{}'::jsonb)
      FROM drainpipe.job_queue_stats_v2(stats_v2.queues) s
$$;

-- the child's id, or null unless the id is a dead job of the queue not replayed yet
CREATE OR REPLACE FUNCTION drainpipe_api.replay_v2(queue text, id bigint)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.replay_dead_job_v2(replay_v2.queue, replay_v2.id)
$$;

-- the job succeeded without its work (Skip); false: the lease was lost or it was cancelled
CREATE OR REPLACE FUNCTION drainpipe_api.skip_v1(
    queue text, id bigint, attempt integer, code text, now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.skip_job_v1(skip_v1.queue, skip_v1.id, skip_v1.attempt, skip_v1.code, skip_v1.now)
$$;

-- fail_v1 recording a safe code; discard: dead now, whatever attempts are left
CREATE OR REPLACE FUNCTION drainpipe_api.fail_coded_v1(
    queue text, id bigint, attempt integer, error text, retry_in double precision DEFAULT NULL,
    code text DEFAULT NULL, discard boolean DEFAULT false, now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.fail_job_v2(
        fail_coded_v1.queue, fail_coded_v1.id, fail_coded_v1.attempt, fail_coded_v1.error,
        fail_coded_v1.retry_in, fail_coded_v1.code, fail_coded_v1.discard, fail_coded_v1.now
    )
$$;

-- one record with its history, or null: {id, queue, state, attempts, max_attempts,
-- deadline, tenant, dedupe_key, enqueued_at, eligible_at, started_at, finished_at,
-- last_code, parent_id, replayed_by, history}
CREATE OR REPLACE FUNCTION drainpipe_api.get_job_v1(queue text, id bigint, now timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_jsonb(r) FROM drainpipe.get_job_v1(get_job_v1.queue, get_job_v1.id, get_job_v1.now) r
$$;

-- records newest first, as a JSON array of get_job_v1's objects; row_limit rows at most
CREATE OR REPLACE FUNCTION drainpipe_api.list_jobs_v1(
    queue text DEFAULT NULL, state text DEFAULT NULL, tenant text DEFAULT NULL,
    row_limit integer DEFAULT 100, before_id bigint DEFAULT NULL, before_queue text DEFAULT NULL,
    now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(to_jsonb(r) - 'n' ORDER BY r.n), '[]'::jsonb)
      FROM drainpipe.list_jobs_v1(
               list_jobs_v1.queue, list_jobs_v1.state, list_jobs_v1.tenant, list_jobs_v1.row_limit,
               list_jobs_v1.before_id, list_jobs_v1.before_queue, list_jobs_v1.now
           ) WITH ORDINALITY AS r(id, queue, state, attempts, max_attempts, deadline, tenant,
                                  dedupe_key, enqueued_at, eligible_at, started_at, finished_at,
                                  last_code, parent_id, replayed_by, history, n)
$$;

-- "cancelled", "terminal" (finished already), or null (no such job)
CREATE OR REPLACE FUNCTION drainpipe_api.cancel_v1(queue text, id bigint, now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.cancel_job_v1(cancel_v1.queue, cancel_v1.id, cancel_v1.now)
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

NOTIFY pgrst, 'reload schema';

SELECT set_config('check_function_bodies', 'on', true);
