-- rest-api: flow control (docs/flow-control.md) over PostgREST. ensure_policy_v2 plus the
-- flow limits; v2 stays for the previous release (it leaves stored limits as they are).
-- Claims need nothing new: claim_v1 and the turn call the jobs functions that enforce them.
-- flow_holds_v1 says why queued jobs are held (JobRecord.held_by); enqueue_flow_v1 is a
-- debounced or throttled enqueue.
SELECT set_config('check_function_bodies', 'off', true);

CREATE OR REPLACE FUNCTION drainpipe_api.ensure_policy_v3(
    queue text, max_payload_bytes integer DEFAULT NULL, max_pending integer DEFAULT NULL,
    lease double precision DEFAULT NULL, max_lease double precision DEFAULT NULL,
    max_delay double precision DEFAULT NULL, max_attempts integer DEFAULT NULL,
    attempt_window double precision DEFAULT NULL, retention double precision DEFAULT NULL,
    encrypt boolean DEFAULT false, replay_window double precision DEFAULT NULL,
    replayable boolean DEFAULT true, concurrency integer DEFAULT NULL,
    key_concurrency integer DEFAULT NULL, rate_count integer DEFAULT NULL,
    rate_per double precision DEFAULT NULL, key_rate_count integer DEFAULT NULL,
    key_rate_per double precision DEFAULT NULL, ordered boolean DEFAULT false
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.ensure_queue_policy_v3(
        ensure_policy_v3.queue, ensure_policy_v3.max_payload_bytes, ensure_policy_v3.max_pending,
        ensure_policy_v3.lease, ensure_policy_v3.max_lease, ensure_policy_v3.max_delay,
        ensure_policy_v3.max_attempts, ensure_policy_v3.attempt_window,
        ensure_policy_v3.retention, ensure_policy_v3.encrypt, ensure_policy_v3.replay_window,
        ensure_policy_v3.replayable, ensure_policy_v3.concurrency,
        ensure_policy_v3.key_concurrency, ensure_policy_v3.rate_count,
        ensure_policy_v3.rate_per, ensure_policy_v3.key_rate_count,
        ensure_policy_v3.key_rate_per, ensure_policy_v3.ordered
    );
    RETURN true;
END
$$;

-- [[queue, id, held_by], ...] for the held ones of the given queued jobs (JobRecord.held_by)
CREATE OR REPLACE FUNCTION drainpipe_api.flow_holds_v1(queues text[], ids bigint[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_array(h.queue, h.id, h.held_by)), '[]'::jsonb)
      FROM drainpipe.job_flow_holds_v1(flow_holds_v1.queues, flow_holds_v1.ids) AS h
$$;

-- a debounced or throttled enqueue (jobs 0015's enqueue_flow_job_v1); the job's id
CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_flow_v1(
    queue text, payload jsonb, key text, debounce double precision DEFAULT NULL,
    throttle double precision DEFAULT NULL, delay double precision DEFAULT 0,
    max_attempts integer DEFAULT 5, dedupe_key text DEFAULT NULL,
    dedupe_running boolean DEFAULT true
)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.enqueue_flow_job_v1(
        enqueue_flow_v1.queue, enqueue_flow_v1.payload, enqueue_flow_v1.delay,
        enqueue_flow_v1.max_attempts, enqueue_flow_v1.dedupe_key, enqueue_flow_v1.dedupe_running,
        enqueue_flow_v1.key, enqueue_flow_v1.debounce, enqueue_flow_v1.throttle
    )
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
