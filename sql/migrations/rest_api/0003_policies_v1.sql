-- rest-api: queue policies (docs/reference.md §9) over PostgREST: store a declared policy where the
-- drainpipe.* checks read it, run retention, and the payload reads/rewrites reencrypt needs.
-- Thin wrappers over the jobs module's 0007_policies functions, shaped as 0001's are
-- (plain named arguments, JSON results, service role only). Enforcement needs nothing
-- here: every drainpipe_api call already goes through functions that read the policy table.
SELECT set_config('check_function_bodies', 'off', true);

-- stores (or replaces) the queue's policy; null limits mean "no limit"
CREATE OR REPLACE FUNCTION drainpipe_api.ensure_policy_v1(
    queue text, max_payload_bytes integer DEFAULT NULL, max_pending integer DEFAULT NULL,
    lease double precision DEFAULT NULL, max_lease double precision DEFAULT NULL,
    max_delay double precision DEFAULT NULL, max_attempts integer DEFAULT NULL,
    attempt_window double precision DEFAULT NULL, retention double precision DEFAULT NULL,
    encrypt boolean DEFAULT false
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.ensure_queue_policy_v1(
        ensure_policy_v1.queue, ensure_policy_v1.max_payload_bytes, ensure_policy_v1.max_pending,
        ensure_policy_v1.lease, ensure_policy_v1.max_lease, ensure_policy_v1.max_delay,
        ensure_policy_v1.max_attempts, ensure_policy_v1.attempt_window,
        ensure_policy_v1.retention, ensure_policy_v1.encrypt
    );
    RETURN true;
END
$$;

-- how many terminal records were deleted; null when it ran less than min_interval ago
CREATE OR REPLACE FUNCTION drainpipe_api.apply_retention_v1(
    min_interval double precision DEFAULT NULL, now timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.apply_job_retention_v1(
        apply_retention_v1.min_interval, 10000, apply_retention_v1.now
    )
$$;

-- live jobs' stored values in id order after after_id: [{id, payload}]
CREATE OR REPLACE FUNCTION drainpipe_api.live_payloads_v1(
    queue text, after_id bigint DEFAULT 0, row_limit integer DEFAULT 100
)
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', p.id, 'payload', p.payload) ORDER BY p.id),
                    '[]'::jsonb)
      FROM drainpipe.live_job_payloads_v1(
               live_payloads_v1.queue, live_payloads_v1.after_id, live_payloads_v1.row_limit
           ) p
$$;

-- replaces a live job's stored value if it is still old_payload
CREATE OR REPLACE FUNCTION drainpipe_api.rewrite_payload_v1(
    queue text, id bigint, old_payload jsonb, new_payload jsonb
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.rewrite_job_payload_v1(
        rewrite_payload_v1.queue, rewrite_payload_v1.id, rewrite_payload_v1.old_payload,
        rewrite_payload_v1.new_payload
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
