-- jobs 0016: durable steps. A job's handler may record steps (their results kept), sleep,
-- and wait for events; between runs the job is suspended: its lease released, its stored
-- row made eligible again at the wake time (the claim is unchanged: a suspended job is
-- claimable by eligibility, like a job waiting out a backoff).
--
-- Attempts: a suspension is not a failed attempt. The attempt counter of the storage is the
-- fencing token and moves on at every claim, resumptions included; a suspension also raises
-- the stored max_attempts by one and counts itself in job_workflows.suspensions, so the
-- claim's "last attempt" rules stay exact and a reader subtracts the suspensions to get
-- the runs that failed or expired.

-- One row per recorded step of a job, in call order (number 1..). Number 0 is the
-- handler's return value (jobs.result). Written only by a statement that holds the
-- attempt's fence (record_job_step_v1, suspend_job_v1, wait_job_event_v1).
CREATE TABLE IF NOT EXISTS drainpipe.job_steps (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    name text NOT NULL,
    -- done | failed (a failed step is overwritten when a later attempt finishes it)
    state text NOT NULL,
    -- the value (sealed on an encrypted queue); never shown in a record
    result jsonb,
    -- the event a wait took: each wait of a job takes an event at most once
    event_id bigint,
    code text,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL,
    PRIMARY KEY (queue, job_id, number)
);
ALTER TABLE drainpipe.job_steps ENABLE ROW LEVEL SECURITY;

-- What a suspended job waits for, and how often it was suspended (see above).
CREATE TABLE IF NOT EXISTS drainpipe.job_workflows (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    suspensions integer NOT NULL DEFAULT 0,
    -- the fence of the run that suspended last: while the stored fence still equals it, the
    -- job was not resumed since (a reader counts one resumption fewer)
    last_fence integer,
    -- time | event:<name> | children; NULL while running or eligible
    waiting_for text,
    -- the pending wait: its step number, event name and key, and when it times out
    wait_number integer,
    wait_event text,
    wait_key text,
    wait_deadline timestamptz,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue, job_id)
);
ALTER TABLE drainpipe.job_workflows ENABLE ROW LEVEL SECURITY;
-- emit finds the jobs waiting on its name and key
CREATE INDEX IF NOT EXISTS job_workflows_waiting_idx
    ON drainpipe.job_workflows (wait_event, wait_key) WHERE wait_event IS NOT NULL;

-- Emitted events, kept event_retention (7 days by default: purge_job_events_v1).
CREATE TABLE IF NOT EXISTS drainpipe.job_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL,
    key text NOT NULL,
    data jsonb,
    emitted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.job_events ENABLE ROW LEVEL SECURITY;
-- a wait takes the oldest match: by name and key, in emission order
CREATE INDEX IF NOT EXISTS job_events_match_idx ON drainpipe.job_events (name, key, id);
-- retention by age; rows arrive in time order
CREATE INDEX IF NOT EXISTS job_events_emitted_brin ON drainpipe.job_events USING brin (emitted_at);

-- Serialises an emit against a wait on the same name and key, so neither misses the
-- other: the wait looks for a stored event and registers itself under this lock, the emit
-- stores its event and wakes the registered waiters under it.
CREATE OR REPLACE FUNCTION drainpipe.lock_job_event(p_event text, p_key text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('drainpipe.event:' || p_event || chr(1) || p_key, 0))
$$;

CREATE OR REPLACE FUNCTION drainpipe.assert_event_name(p_event text, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_event IS NULL OR length(p_event) = 0 OR length(p_event) > 200 THEN
        RAISE EXCEPTION 'event must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL OR length(p_key) > 200 THEN
        RAISE EXCEPTION 'event key must be at most 200 characters' USING ERRCODE = '22023';
    END IF;
END
$$;
