-- drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules.
-- This part: schedules run by drainpipe's drain (time zones kept).
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.job_schedules (
    name text NOT NULL,
    cron text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    queue text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    tenant text,
    next_run timestamp with time zone,
    last_run timestamp with time zone,
    locked_until timestamp with time zone,
    claim_token uuid,
    first_after timestamp with time zone,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    due_at timestamp with time zone GENERATED ALWAYS AS (COALESCE(next_run, '-infinity'::timestamp with time zone)) STORED,
    CONSTRAINT job_schedules_pkey PRIMARY KEY (name),
    CONSTRAINT job_schedules_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200))),
    CONSTRAINT job_schedules_queue_name CHECK ((queue ~ '^[a-z_][a-z0-9_]{0,46}$'::text))
);
CREATE INDEX IF NOT EXISTS job_schedules_due_idx ON drainpipe.job_schedules USING btree (due_at, name);
CREATE INDEX IF NOT EXISTS job_schedules_tenant_idx ON drainpipe.job_schedules USING btree (tenant, name) WHERE (tenant IS NOT NULL);
ALTER TABLE drainpipe.job_schedules ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.known_time_zones (
    name text NOT NULL,
    CONSTRAINT known_time_zones_pkey PRIMARY KEY (name)
);
ALTER TABLE drainpipe.known_time_zones ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.advance_schedule_v1(p_name text, p_ran timestamp with time zone, p_next_run timestamp with time zone, p_claim_token uuid, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH moved AS (
        UPDATE drainpipe.job_schedules s
           SET next_run = date_trunc('milliseconds', p_next_run),
               last_run = coalesce(date_trunc('milliseconds', p_ran), s.last_run),
               first_after = NULL,
               locked_until = NULL,
               claim_token = NULL
         WHERE s.name = p_name
           AND s.claim_token = p_claim_token
           AND CASE WHEN s.next_run IS NULL THEN s.first_after IS NOT NULL
                    ELSE date_trunc('milliseconds', s.next_run) = date_trunc('milliseconds', p_ran) END
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM moved) $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_time_zone(p_time_zone text)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_time_zone = 'UTC'
       OR EXISTS (SELECT 1 FROM drainpipe.known_time_zones z WHERE z.name = p_time_zone) THEN
        RETURN;
    END IF;
    IF p_time_zone IS NULL
       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names t WHERE t.name = p_time_zone) THEN
        RAISE EXCEPTION 'Unknown time zone %', p_time_zone USING ERRCODE = '22023';
    END IF;
    INSERT INTO drainpipe.known_time_zones (name) VALUES (p_time_zone) ON CONFLICT DO NOTHING;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_due_schedules_v1(p_lease double precision DEFAULT 60, p_batch integer DEFAULT 100, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.schedule_claim_v1 LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    UPDATE drainpipe.job_schedules s
       SET locked_until = coalesce(p_now, statement_timestamp()) + make_interval(secs => greatest(coalesce(p_lease, 60), 1)),
           -- a fresh token per claim: a drain whose lease ran out cannot advance a later claim
           claim_token = gen_random_uuid()
     -- = ANY (ARRAY(...)), not a join: the planner keeps the primary key lookup even with a
     -- generic plan that guesses the batch is a tenth of the table
     WHERE s.name = ANY (ARRAY(
        -- SKIP LOCKED: two drains claiming at once split the due schedules between them
        -- coalesce(p_now, statement_timestamp()), being stable, bounds the index scan; clock_timestamp() would not
        SELECT d.name
          FROM drainpipe.job_schedules d
         WHERE d.due_at <= coalesce(p_now, statement_timestamp())
           AND (d.locked_until IS NULL OR d.locked_until <= coalesce(p_now, statement_timestamp()))
         ORDER BY d.due_at, d.name
         LIMIT greatest(coalesce(p_batch, 100), 1)
           FOR UPDATE SKIP LOCKED
     ))
    RETURNING s.name, s.cron, s.time_zone, s.queue, s.payload, s.next_run, s.first_after, s.claim_token $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_schedules_v1(p_prefix text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text)
 RETURNS SETOF drainpipe.schedule_entry_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.name, s.cron, s.time_zone, s.queue, s.tenant, s.next_run, s.last_run,
           s.locked_until, s.created_at
      FROM drainpipe.job_schedules s
     -- starts_with, not LIKE: a prefix may contain % or _
     WHERE (p_prefix IS NULL OR starts_with(s.name, p_prefix))
       AND (p_tenant IS NULL OR s.tenant = p_tenant)
     ORDER BY s.name $function$;

CREATE OR REPLACE FUNCTION drainpipe.schedule_job_v1(p_name text, p_cron text, p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_time_zone text DEFAULT 'UTC'::text, p_next_run timestamp with time zone DEFAULT NULL::timestamp with time zone, p_tenant text DEFAULT NULL::text)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := date_trunc('milliseconds', clock_timestamp());
    v_next timestamptz := date_trunc('milliseconds', p_next_run);
    v_cron text := btrim(p_cron, E' \t\r\n');
BEGIN
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'Invalid schedule name %: 1 to 200 characters', p_name USING ERRCODE = '22023';
    END IF;
    PERFORM drainpipe.assert_schedule_form(p_cron);
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.assert_time_zone(p_time_zone);
    INSERT INTO drainpipe.job_schedules AS s
        (name, cron, time_zone, queue, payload, tenant, next_run, first_after)
    VALUES (p_name, v_cron, p_time_zone, p_queue, coalesce(p_payload, '{}'), p_tenant, v_next,
            CASE WHEN v_next IS NULL THEN v_now END)
    ON CONFLICT (name) DO UPDATE SET
        queue = excluded.queue,
        payload = excluded.payload,
        tenant = excluded.tenant,
        -- a new cron or zone frees the schedule, so a drain holding the old version cannot
        -- advance it; the same cron and zone (ensure_schedules at every deploy) keep the
        -- claim, or the run that drain is enqueueing would stay due and run twice
        locked_until = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                            THEN s.locked_until END,
        claim_token = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                           THEN s.claim_token END,
        next_run = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                        THEN s.next_run ELSE excluded.next_run END,
        first_after = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                           THEN s.first_after ELSE excluded.first_after END,
        cron = excluded.cron,
        time_zone = excluded.time_zone;
    RETURN NULL;  -- the pg_cron scheduler returns its job id here
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_job_v1(p_name text)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone) $function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_tenant_v1(p_tenant text)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE tenant = p_tenant RETURNING 1)
    SELECT count(*)::integer FROM gone $function$;

RESET check_function_bodies;
