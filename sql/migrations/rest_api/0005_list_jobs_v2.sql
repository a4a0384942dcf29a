-- rest-api: the job listing newest first by enqueued_at, then id, then queue, across queues
-- (drainpipe.list_jobs_v2, jobs 0010). list_jobs_v1 stays for the previous release.
SELECT set_config('check_function_bodies', 'off', true);

CREATE OR REPLACE FUNCTION drainpipe_api.list_jobs_v2(
    queue text DEFAULT NULL, state text DEFAULT NULL, tenant text DEFAULT NULL,
    row_limit integer DEFAULT 100, before_at timestamptz DEFAULT NULL,
    before_id bigint DEFAULT NULL, before_queue text DEFAULT NULL, now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(to_jsonb(r) - 'n' ORDER BY r.n), '[]'::jsonb)
      FROM drainpipe.list_jobs_v2(
               list_jobs_v2.queue, list_jobs_v2.state, list_jobs_v2.tenant, list_jobs_v2.row_limit,
               list_jobs_v2.before_at, list_jobs_v2.before_id, list_jobs_v2.before_queue,
               list_jobs_v2.now
           ) WITH ORDINALITY AS r(id, queue, state, attempts, max_attempts, deadline, tenant,
                                  dedupe_key, enqueued_at, eligible_at, started_at, finished_at,
                                  last_code, parent_id, replayed_by, history, n)
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
