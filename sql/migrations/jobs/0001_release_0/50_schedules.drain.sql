-- jobs: schedules run by the drain (scheduler="drain"). Rows say when each schedule runs
-- next; run_schedules() in Python leases the due ones, enqueues one run each and advances
-- them, because the cron/DST arithmetic lives in Python (drainpipe.cron). A schedule
-- written from SQL (a trigger) has no next run yet: the next drain computes it.

CREATE TABLE IF NOT EXISTS drainpipe.job_schedules (
    name text PRIMARY KEY CONSTRAINT job_schedules_name_length CHECK (length(name) BETWEEN 1 AND 200),
    cron text NOT NULL,
    time_zone text NOT NULL DEFAULT 'UTC',
    queue text NOT NULL CONSTRAINT job_schedules_queue_name CHECK (queue ~ '^[a-z_][a-z0-9_]{0,46}$'),
    -- the payload, or the context envelope around it, as enqueue stores it
    payload jsonb NOT NULL DEFAULT '{}',
    tenant text,
    -- null: not computed yet (written from SQL, or cron/zone changed without a next run)
    next_run timestamptz,
    last_run timestamptz,
    -- a drain holds the schedule until then (between claiming and advancing it)
    locked_until timestamptz,
    -- which claim holds it: only that drain may advance the schedule
    claim_token uuid,
    -- the first run of a schedule without a next run comes after this instant
    first_after timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- next_run with "not computed yet" first: one index range holds every due schedule
    due_at timestamptz GENERATED ALWAYS AS (coalesce(next_run, '-infinity'::timestamptz)) STORED
);
ALTER TABLE drainpipe.job_schedules ENABLE ROW LEVEL SECURITY;
-- claim_due_schedules reads the range due_at <= now in this order and stops after a batch.
ALTER TABLE drainpipe.job_schedules ADD COLUMN IF NOT EXISTS claim_token uuid;
CREATE INDEX IF NOT EXISTS job_schedules_due_idx ON drainpipe.job_schedules (due_at, name);
-- list_schedules / unschedule_tenant by tenant; most schedules have none.
CREATE INDEX IF NOT EXISTS job_schedules_tenant_idx
    ON drainpipe.job_schedules (tenant, name) WHERE tenant IS NOT NULL;

-- Time zones schedule_job has seen in pg_timezone_names: that view reads the whole tz
-- database (tens of milliseconds), too slow to consult on every trigger-written schedule.
CREATE TABLE IF NOT EXISTS drainpipe.known_time_zones (name text PRIMARY KEY);
ALTER TABLE drainpipe.known_time_zones ENABLE ROW LEVEL SECURITY;

CREATE OR REPLACE FUNCTION drainpipe.assert_time_zone(p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- Create or replace a schedule. Same cron and zone keep the next run (a due run is not
-- skipped by rewriting the schedule) and a drain's claim on it (that drain enqueues the
-- due run with the payload it read); otherwise next_run is p_next_run, or null with
-- first_after = now so the next drain computes it (how triggers write schedules).
CREATE OR REPLACE FUNCTION drainpipe.schedule_job(
    p_name text,
    p_cron text,
    p_queue text,
    p_payload jsonb DEFAULT '{}',
    p_time_zone text DEFAULT 'UTC',
    p_next_run timestamptz DEFAULT NULL,
    p_tenant text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_job(p_name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_schedules(p_prefix text DEFAULT NULL, p_tenant text DEFAULT NULL)
RETURNS TABLE (
    name text, cron text, time_zone text, queue text, tenant text, next_run timestamptz,
    last_run timestamptz, leased_until timestamptz, created_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.name, s.cron, s.time_zone, s.queue, s.tenant, s.next_run, s.last_run,
           s.locked_until, s.created_at
      FROM drainpipe.job_schedules s
     -- starts_with, not LIKE: a prefix may contain % or _
     WHERE (p_prefix IS NULL OR starts_with(s.name, p_prefix))
       AND (p_tenant IS NULL OR s.tenant = p_tenant)
     ORDER BY s.name
$$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_tenant(p_tenant text)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE tenant = p_tenant RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- Lease up to p_batch schedules that are due (or have no next run yet) for p_lease
-- seconds, so a concurrent drain neither sees nor runs them.
CREATE OR REPLACE FUNCTION drainpipe.claim_due_schedules(p_lease double precision DEFAULT 60, p_batch integer DEFAULT 100)
RETURNS TABLE (
    name text, cron text, time_zone text, queue text, payload jsonb, next_run timestamptz,
    first_after timestamptz, claim_token uuid
)
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE drainpipe.job_schedules s
       SET locked_until = statement_timestamp() + make_interval(secs => greatest(coalesce(p_lease, 60), 1)),
           -- a fresh token per claim: a drain whose lease ran out cannot advance a later claim
           claim_token = gen_random_uuid()
     -- = ANY (ARRAY(...)), not a join: the planner keeps the primary key lookup even with a
     -- generic plan that guesses the batch is a tenth of the table
     WHERE s.name = ANY (ARRAY(
        -- SKIP LOCKED: two drains claiming at once split the due schedules between them
        -- statement_timestamp(), being stable, bounds the index scan; clock_timestamp() would not
        SELECT d.name
          FROM drainpipe.job_schedules d
         WHERE d.due_at <= statement_timestamp()
           AND (d.locked_until IS NULL OR d.locked_until <= statement_timestamp())
         ORDER BY d.due_at, d.name
         LIMIT greatest(coalesce(p_batch, 100), 1)
           FOR UPDATE SKIP LOCKED
     ))
    RETURNING s.name, s.cron, s.time_zone, s.queue, s.payload, s.next_run, s.first_after, s.claim_token
$$;

-- Record that the run p_ran happened (null: nothing ran, the first run was computed) and
-- set the next one. Only the run a drain claimed can be advanced: the stored next run must
-- still equal p_ran (to the millisecond), or still be uncomputed, and the schedule must
-- still be held by this claim (p_claim_token; a new cron or zone, or a later claim after
-- this one's lease ran out, replaces it). False: rescheduled or advanced by another drain.
CREATE OR REPLACE FUNCTION drainpipe.advance_schedule(
    p_name text, p_ran timestamptz, p_next_run timestamptz, p_claim_token uuid
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
    SELECT EXISTS (SELECT 1 FROM moved)
$$;
