-- rest-api 0010: stats_v4, stats_v3 plus each queue's held counts (jobs 0018,
-- job_queue_stats_v4): {"paused" | "order" | "concurrency" | "rate": n}, empty when none;
-- queue_holds_v1 for the drain route's report.
SELECT set_config('check_function_bodies', 'off', true);
CREATE OR REPLACE FUNCTION drainpipe_api.stats_v4(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
               jsonb_object_agg(s.queue, jsonb_build_object(
                   'ready', s.ready, 'in_flight', s.in_flight, 'delayed', s.delayed,
                   'dead', s.dead, 'succeeded', s.succeeded, 'cancelled', s.cancelled,
                   'oldest_age_seconds', s.oldest_age_seconds, 'paused', s.paused,
                   'held', s.held)),
               '{}'::jsonb)
      FROM drainpipe.job_queue_stats_v4(stats_v4.queues) s
$$;
-- The drain route's report on its idle queues (jobs 0018, job_queue_holds_v1):
-- {"paused": [queue, ...], "held": {queue: {reason: n}}}, the queues without held jobs left out.
CREATE OR REPLACE FUNCTION drainpipe_api.queue_holds_v1(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
               'paused', coalesce(jsonb_agg(h.queue ORDER BY h.queue) FILTER (WHERE h.paused), '[]'::jsonb),
               'held', coalesce(jsonb_object_agg(h.queue, h.held) FILTER (WHERE h.held <> '{}'::jsonb), '{}'::jsonb))
      FROM drainpipe.job_queue_holds_v1(queue_holds_v1.queues) h
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
