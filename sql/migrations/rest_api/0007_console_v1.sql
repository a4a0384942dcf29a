-- rest-api: pausing a queue over PostgREST (jobs 0012, docs/policies.md#pause). Thin
-- wrappers shaped as 0001's are (plain named arguments, JSON results, service role only).
-- The claim needs nothing here: claim_v1 and complete_and_claim_v1 call the jobs module's
-- claim, which reads the pause itself. stats_v2 stays for the previous release's code.
SELECT set_config('check_function_bodies', 'off', true);

-- true when the queue was running (now paused)
CREATE OR REPLACE FUNCTION drainpipe_api.pause_v1(queue text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.pause_queue_v1(pause_v1.queue) $$;

-- true when the queue was paused (now running)
CREATE OR REPLACE FUNCTION drainpipe_api.resume_v1(queue text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.resume_queue_v1(resume_v1.queue) $$;

-- the paused ones of queues, as a JSON array
CREATE OR REPLACE FUNCTION drainpipe_api.paused_v1(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(p.queue), '[]'::jsonb)
      FROM drainpipe.paused_queues_v1(paused_v1.queues) AS p(queue)
$$;

-- stats_v2 plus "paused" per queue
CREATE OR REPLACE FUNCTION drainpipe_api.stats_v3(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
               jsonb_object_agg(s.queue, jsonb_build_object(
                   'ready', s.ready, 'in_flight', s.in_flight, 'delayed', s.delayed,
                   'dead', s.dead, 'succeeded', s.succeeded, 'cancelled', s.cancelled,
                   'oldest_age_seconds', s.oldest_age_seconds, 'paused', s.paused)),
               '{}'::jsonb)
      FROM drainpipe.job_queue_stats_v3(stats_v3.queues) s
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
