-- drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules.
-- This part: schedules run by pg_cron.
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.advance_schedule_v1(p_name text, p_ran timestamp with time zone, p_next_run timestamp with time zone, p_claim_token uuid, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT false $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_due_schedules_v1(p_lease double precision DEFAULT 60, p_batch integer DEFAULT 100, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.schedule_claim_v1 LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::jsonb, NULL::timestamptz, NULL::timestamptz,
           NULL::uuid
     WHERE false $function$;

CREATE OR REPLACE FUNCTION drainpipe.has_pg_cron()
 RETURNS boolean LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') $function$;

CREATE OR REPLACE FUNCTION drainpipe.is_pg_cron_job_command(p_command text)
 RETURNS boolean LANGUAGE sql IMMUTABLE AS $function$
    SELECT starts_with(p_command, 'SELECT drainpipe.enqueue_job_v1(')
        OR starts_with(p_command, 'SELECT drainpipe.enqueue_job(') $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_schedules_v1(p_prefix text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text)
 RETURNS SETOF drainpipe.schedule_entry_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_tenant IS NOT NULL OR NOT drainpipe.has_pg_cron() THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT j.jobname::text, j.schedule::text, 'UTC'::text,
               substring(j.command FROM '^SELECT drainpipe\.enqueue_job(?:_v1)?\(''([a-z0-9_]+)''')::text,
               NULL::text, NULL::timestamptz,
               (SELECT max(r.start_time) FROM cron.job_run_details r WHERE r.jobid = j.jobid),
               NULL::timestamptz, NULL::timestamptz
          FROM cron.job j
         WHERE j.jobname IS NOT NULL
           -- drainpipe's jobs only: ensure_schedules removes what this lists under its prefix
           AND drainpipe.is_pg_cron_job_command(j.command)
           AND (p_prefix IS NULL OR starts_with(j.jobname, p_prefix))
         ORDER BY j.jobname;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.schedule_job_v1(p_name text, p_cron text, p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_time_zone text DEFAULT 'UTC'::text, p_next_run timestamp with time zone DEFAULT NULL::timestamp with time zone, p_tenant text DEFAULT NULL::text)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_cron text := btrim(p_cron, E' \t\r\n');
    v_id bigint;
BEGIN
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'Invalid schedule name %: 1 to 200 characters', p_name USING ERRCODE = '22023';
    END IF;
    PERFORM drainpipe.assert_schedule_form(p_cron);
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_tenant IS NOT NULL THEN
        RAISE EXCEPTION 'pg_cron schedules have no tenant (schedule %); install the jobs module with scheduler "drain" for tenant schedules', p_name
            USING ERRCODE = '22023';
    END IF;
    IF coalesce(p_time_zone, '') <> 'UTC' THEN
        RAISE EXCEPTION 'pg_cron runs schedules in cron.timezone, not %; install the jobs module with scheduler "drain" for time zones', p_time_zone
            USING ERRCODE = '22023';
    END IF;
    IF v_cron ~* '^[0-9]+\s+(minute|hour)s?$' THEN
        RAISE EXCEPTION 'pg_cron cannot run the interval %; use five cron fields, or scheduler "drain"', p_cron
            USING ERRCODE = '22023';
    END IF;
    IF NOT drainpipe.has_pg_cron() THEN
        RAISE EXCEPTION 'schedule_job needs pg_cron: CREATE EXTENSION pg_cron in the database named by cron.database_name'
            USING ERRCODE = '55000';
    END IF;
    -- p_next_run is ignored: pg_cron decides when to run
    BEGIN
        v_id := cron.schedule(
            p_name,
            v_cron,
            format('SELECT drainpipe.enqueue_job_v1(%L, %L::jsonb)', p_queue, coalesce(p_payload, '{}')::text)
        );
    EXCEPTION WHEN invalid_parameter_value OR internal_error THEN
        RAISE EXCEPTION 'pg_cron rejected the schedule %: %', p_cron, SQLERRM USING ERRCODE = '22023';
    END;
    RETURN v_id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_job_v1(p_name text)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- two statements: a query naming cron.job cannot even be planned without pg_cron
    IF NOT drainpipe.has_pg_cron() THEN
        RETURN false;
    END IF;
    -- only a job whose command is ours: cron.job also holds jobs users made by hand
    IF NOT EXISTS (SELECT 1 FROM cron.job j
                    WHERE j.jobname = p_name
                      AND drainpipe.is_pg_cron_job_command(j.command)) THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(p_name::name);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_tenant_v1(p_tenant text)
 RETURNS integer LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT 0  -- pg_cron schedules never have a tenant $function$;

RESET check_function_bodies;
