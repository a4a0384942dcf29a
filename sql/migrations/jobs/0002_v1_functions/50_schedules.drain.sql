-- jobs v1: schedules run by the drain (scheduler="drain"); the same table as release 0.
-- claim_due_schedules_v1 and advance_schedule_v1 take p_now (NULL = the server clock):
-- advancing accepts p_now for the shared signature (the claim's token is the fence).

CREATE OR REPLACE FUNCTION drainpipe.schedule_job_v1(
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

CREATE OR REPLACE FUNCTION drainpipe.unschedule_job_v1(p_name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_schedules_v1(p_prefix text DEFAULT NULL, p_tenant text DEFAULT NULL)
RETURNS SETOF drainpipe.schedule_entry_v1
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

CREATE OR REPLACE FUNCTION drainpipe.unschedule_tenant_v1(p_tenant text)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE tenant = p_tenant RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- Lease up to p_batch schedules that are due (or have no next run yet) for p_lease
-- seconds, so a concurrent drain neither sees nor runs them.
CREATE OR REPLACE FUNCTION drainpipe.claim_due_schedules_v1(
    p_lease double precision DEFAULT 60, p_batch integer DEFAULT 100, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.schedule_claim_v1
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
    RETURNING s.name, s.cron, s.time_zone, s.queue, s.payload, s.next_run, s.first_after, s.claim_token
$$;

-- Record that the run p_ran happened (null: nothing ran, the first run was computed) and
-- set the next one. Only the run a drain claimed can be advanced: the stored next run must
-- still equal p_ran (to the millisecond), or still be uncomputed, and the schedule must
-- still be held by this claim (p_claim_token; a new cron or zone, or a later claim after
-- this one's lease ran out, replaces it). False: rescheduled or advanced by another drain.
CREATE OR REPLACE FUNCTION drainpipe.advance_schedule_v1(
    p_name text, p_ran timestamptz, p_next_run timestamptz, p_claim_token uuid,
    p_now timestamptz DEFAULT NULL
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
