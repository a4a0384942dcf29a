-- Every drainpipe function runs as its owner (security definer) and is executable only by
-- the service role: anon and authenticated (Supabase's API roles) and PUBLIC get nothing (but one,
-- at the end).
ALTER DEFAULT PRIVILEGES IN SCHEMA drainpipe REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe FROM PUBLIC;
DO $privileges$
DECLARE
    api_role text;
BEGIN
    FOREACH api_role IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = api_role) THEN
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe FROM %I', api_role);
            EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA drainpipe FROM %I', api_role);
            EXECUTE format('REVOKE ALL ON SCHEMA drainpipe FROM %I', api_role);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        GRANT USAGE ON SCHEMA drainpipe TO service_role;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA drainpipe TO service_role;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA drainpipe TO service_role;
    END IF;
    -- but one: the last term of a pgmq policy queue's lease bound, a check constraint that
    -- every writer of the queue's table runs (it only refuses a lease over max_lease)
    IF to_regprocedure('drainpipe.pgmq_lease_refused(text, timestamptz, double precision)') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION drainpipe.pgmq_lease_refused(text, timestamptz, double precision) TO PUBLIC;
    END IF;
END
$privileges$;
