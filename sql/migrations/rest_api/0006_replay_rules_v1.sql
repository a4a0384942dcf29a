-- rest-api: replay rules (docs/policies.md#replaying-safely) over PostgREST. Thin wrappers
-- over the jobs module's 0011_replay_rules functions, shaped as 0001's are (plain named
-- arguments, JSON results, service role only). replay_v1/v2 and retry_dead_v1 stay for the
-- previous release, and obey the stored rules already (through the jobs functions they
-- call): a refused replay_v2 answers the error DPR01 / DPR02.
SELECT set_config('check_function_bodies', 'off', true);

-- ensure_policy_v1 plus the replay rules
CREATE OR REPLACE FUNCTION drainpipe_api.ensure_policy_v2(
    queue text, max_payload_bytes integer DEFAULT NULL, max_pending integer DEFAULT NULL,
    lease double precision DEFAULT NULL, max_lease double precision DEFAULT NULL,
    max_delay double precision DEFAULT NULL, max_attempts integer DEFAULT NULL,
    attempt_window double precision DEFAULT NULL, retention double precision DEFAULT NULL,
    encrypt boolean DEFAULT false, replay_window double precision DEFAULT NULL,
    replayable boolean DEFAULT true
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.ensure_queue_policy_v2(
        ensure_policy_v2.queue, ensure_policy_v2.max_payload_bytes, ensure_policy_v2.max_pending,
        ensure_policy_v2.lease, ensure_policy_v2.max_lease, ensure_policy_v2.max_delay,
        ensure_policy_v2.max_attempts, ensure_policy_v2.attempt_window,
        ensure_policy_v2.retention, ensure_policy_v2.encrypt, ensure_policy_v2.replay_window,
        ensure_policy_v2.replayable
    );
    RETURN true;
END
$$;

-- {"id": the new job's id or null, "code": why not, or null}; the caller's declared rules
-- (replay_window, replayable) apply on top of the stored ones
CREATE OR REPLACE FUNCTION drainpipe_api.replay_v3(
    queue text, id bigint, replay_window double precision DEFAULT NULL,
    replayable boolean DEFAULT true
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', r.new_job_id, 'code', r.code)
      FROM drainpipe.replay_dead_job_v3(replay_v3.queue, replay_v3.id, replay_v3.replay_window,
                                        replay_v3.replayable) AS r
$$;

-- [[job id, new id or null, code or null], ...]: one entry per dead job tried
CREATE OR REPLACE FUNCTION drainpipe_api.retry_dead_v2(
    queue text, ids bigint[] DEFAULT NULL, batch integer DEFAULT 1000,
    replay_window double precision DEFAULT NULL, replayable boolean DEFAULT true
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_array(r.job_id, r.new_job_id, r.code)), '[]'::jsonb)
      FROM drainpipe.retry_dead_jobs_v2(retry_dead_v2.queue, retry_dead_v2.ids, retry_dead_v2.batch,
                                        retry_dead_v2.replay_window, retry_dead_v2.replayable) AS r
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
