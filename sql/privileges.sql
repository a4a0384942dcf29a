-- Every drainpipe function runs as its owner (security definer) and is executable only by
-- the service role: anon and authenticated (Supabase's API roles) and PUBLIC get nothing.
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
END
$privileges$;
