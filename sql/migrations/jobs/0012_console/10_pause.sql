-- jobs 0012: the console (docs/job-inbox.md) and pausing a queue (docs/policies.md#pause).
--
-- A paused queue is a row here. Every claim reads it first (claim_jobs_v1 and
-- complete_and_claim_jobs_v1 on both storages, so Python, the executor app, PostgREST and
-- SQL callers alike): a paused queue hands out nothing, while enqueues, completions,
-- failures, extends and cancels go on. A claim whose check ran before a pause committed may
-- still take its batch; once pause_queue_v1 has committed, no claim that starts takes one.
-- The check is one primary-key probe of a table with a row per paused queue: what a claim
-- pays for the feature (docs/benchmarks.md).

CREATE TABLE IF NOT EXISTS drainpipe.queue_pauses (
    queue text PRIMARY KEY,
    paused_at timestamptz NOT NULL
);
ALTER TABLE drainpipe.queue_pauses ENABLE ROW LEVEL SECURITY;

-- Pause p_queue: true when it was running (now paused), false when it was paused already.
CREATE OR REPLACE FUNCTION drainpipe.pause_queue_v1(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_added integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_pauses (queue, paused_at)
    VALUES (p_queue, coalesce(p_now, clock_timestamp()))
    ON CONFLICT (queue) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    RETURN v_added > 0;
END
$$;

-- Resume p_queue: true when it was paused (now running), false when it was running.
CREATE OR REPLACE FUNCTION drainpipe.resume_queue_v1(p_queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_removed integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    DELETE FROM drainpipe.queue_pauses WHERE queue = p_queue;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed > 0;
END
$$;

-- The paused ones of p_queues (every paused queue when NULL).
CREATE OR REPLACE FUNCTION drainpipe.paused_queues_v1(p_queues text[] DEFAULT NULL)
RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.queue FROM drainpipe.queue_pauses p
     WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
     ORDER BY p.queue
$$;

-- job_queue_stats_v2 plus whether each queue is paused (QueueStats.paused).
DO $types$
BEGIN
    IF to_regtype('drainpipe.job_queue_stats_v3') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v3 AS (
            queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
            succeeded bigint, cancelled bigint, oldest_age_seconds double precision,
            paused boolean
        );
    END IF;
END
$types$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v3(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v3
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.succeeded, s.cancelled,
           s.oldest_age_seconds,
           EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = s.queue)
      FROM drainpipe.job_queue_stats_v2(p_queues) s
$$;
