-- jobs 0004: every job is a record (states, attempt history, cancel, codes, replay with
-- lineage), for both backends. Shared here: the row types, the attempt table, the helpers
-- that turn stored columns into what a reader sees.

DO $types$
BEGIN
    -- One job as an operator sees it: metadata only, never the payload, the error text or a
    -- lease token. history is a jsonb array of attempts (get fills it, list leaves it NULL).
    IF to_regtype('drainpipe.job_record_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_record_v1 AS (
            id bigint, queue text, state text, attempts integer, max_attempts integer,
            deadline timestamptz, tenant text, dedupe_key text, enqueued_at timestamptz,
            eligible_at timestamptz, started_at timestamptz, finished_at timestamptz,
            last_code text, parent_id bigint, replayed_by bigint, history jsonb
        );
    END IF;
    -- v1 plus the terminal counts the records keep
    IF to_regtype('drainpipe.job_queue_stats_v2') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v2 AS (
            queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
            succeeded bigint, cancelled bigint, oldest_age_seconds double precision
        );
    END IF;
END
$types$;

-- An attempt that ended other than in success (failed, discarded, expired, cancelled): a
-- success is described by the job's own row (started, finished, attempts), so the common
-- case writes nothing here. Keyed by queue too: pgmq's ids are per queue.
CREATE TABLE IF NOT EXISTS drainpipe.job_attempts (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    started_at timestamptz,
    ended_at timestamptz,
    -- failed, discarded, expired, cancelled
    outcome text NOT NULL,
    code text,
    -- what a holder reported after its attempt was cancelled: succeeded or failed
    late_outcome text,
    PRIMARY KEY (queue, job_id, number)
);
ALTER TABLE drainpipe.job_attempts ENABLE ROW LEVEL SECURITY;

-- The tenant recorded in the context envelope (context.py), without selecting the payload.
-- (No SET search_path, so it is inlined into the queries that call it.)
CREATE OR REPLACE FUNCTION drainpipe.job_tenant(p_stored jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_stored @> '{"$dp": 1}' THEN p_stored #>> '{context,tenant}' END $$;

-- A safe code: ^[A-Z][A-Z0-9_]{0,63}$ (no newline-before-end: Postgres' $ is the end).
CREATE OR REPLACE FUNCTION drainpipe.is_job_code(p_code text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_code IS NOT NULL AND p_code ~ '^[A-Z][A-Z0-9_]{0,63}$' $$;

CREATE OR REPLACE FUNCTION drainpipe.assert_job_code(p_code text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_job_code(p_code) THEN
        RAISE EXCEPTION 'Invalid code "%": uppercase letters, digits and underscores, starting with a letter, at most 64', p_code
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- The state that holds at p_now: a leased job whose lease ended reads retry_wait, or dead
-- when that was its last attempt, before any claim sweeps it.
CREATE OR REPLACE FUNCTION drainpipe.job_state_at(
    p_state text, p_lease_end timestamptz, p_attempts integer, p_max_attempts integer,
    p_now timestamptz
)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_state = 'leased' AND p_lease_end <= p_now
                THEN CASE WHEN p_attempts >= p_max_attempts THEN 'dead' ELSE 'retry_wait' END
                ELSE p_state END
$$;

-- The attempt history of one job: the stored attempt rows, and the attempts the job row
-- describes itself (the latest: running, succeeded, skipped, or expired when its lease
-- ended; an earlier one without a row was taken over after its lease ran out).
CREATE OR REPLACE FUNCTION drainpipe.job_history_v1(
    p_queue text, p_id bigint, p_attempts integer, p_state text, p_started_at timestamptz,
    p_finished_at timestamptz, p_lease_end timestamptz, p_last_code text, p_now timestamptz
)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'number', g.n,
               'started_at', CASE WHEN a.number IS NOT NULL THEN a.started_at
                                  WHEN g.n = p_attempts THEN p_started_at END,
               'ended_at', CASE WHEN a.number IS NOT NULL THEN a.ended_at
                                WHEN g.n < p_attempts THEN NULL
                                WHEN p_state = 'succeeded' THEN p_finished_at
                                WHEN p_state = 'leased' AND p_lease_end <= p_now THEN p_lease_end END,
               'outcome', CASE WHEN a.number IS NOT NULL THEN a.outcome
                               WHEN g.n < p_attempts THEN 'expired'
                               WHEN p_state = 'succeeded' AND p_last_code IS NOT NULL THEN 'skipped'
                               WHEN p_state = 'succeeded' THEN 'succeeded'
                               WHEN p_state = 'leased' AND p_lease_end > p_now THEN 'running'
                               ELSE 'expired' END,
               'code', CASE WHEN a.number IS NOT NULL THEN a.code
                            WHEN g.n < p_attempts THEN 'LEASE_EXPIRED'
                            WHEN p_state = 'succeeded' THEN p_last_code
                            WHEN p_state = 'leased' AND p_lease_end > p_now THEN NULL
                            ELSE 'LEASE_EXPIRED' END,
               'late_outcome', a.late_outcome
           ) ORDER BY g.n), '[]'::jsonb)
      FROM generate_series(1, greatest(p_attempts, 0)) AS g(n)
      LEFT JOIN drainpipe.job_attempts a
        ON a.queue = p_queue AND a.job_id = p_id AND a.number = g.n
$$;
