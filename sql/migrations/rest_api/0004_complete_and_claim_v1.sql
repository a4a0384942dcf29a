-- rest-api: a lane's turn over PostgREST (issue 21): the completions of one batch and the
-- claim of the next in one request, one transaction (drainpipe.complete_and_claim_jobs_v1,
-- jobs 0008). Over HTTP a round trip costs the most, so this halves what a drain pays.
SELECT set_config('check_function_bodies', 'off', true);

-- {"refused": [ids whose completion was refused], "claimed": [claim_v1's rows]}
CREATE OR REPLACE FUNCTION drainpipe_api.complete_and_claim_v1(
    queue text, ids bigint[], attempts integer[], lease double precision DEFAULT 300,
    batch integer DEFAULT 1, now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'refused', coalesce(jsonb_agg(t.id) FILTER (WHERE t.refused), '[]'::jsonb),
        'claimed', coalesce(
            jsonb_agg(jsonb_build_array(t.id, t.attempts, t.enqueued_at, t.visible_until,
                                        t.payload, t.max_attempts, t.last_error))
                FILTER (WHERE NOT t.refused),
            '[]'::jsonb))
      FROM drainpipe.complete_and_claim_jobs_v1(
               complete_and_claim_v1.queue, complete_and_claim_v1.ids,
               complete_and_claim_v1.attempts, complete_and_claim_v1.lease,
               complete_and_claim_v1.batch, complete_and_claim_v1.now) AS t
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
