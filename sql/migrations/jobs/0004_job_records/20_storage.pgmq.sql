-- jobs 0004 on pgmq (first slice): the coded settlements and v2 stats over the v1 storage.
CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL,
    p_code text DEFAULT NULL,
    p_discard boolean DEFAULT false,
    p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.fail_job_v1(p_queue, p_id, p_attempt, p_error, p_retry_in, p_now) $$;

CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.complete_job_v1(p_queue, p_id, p_attempt, p_now) $$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v2(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.replay_dead_job_v1(p_queue, p_id) $$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v2
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, 0::bigint, 0::bigint, s.oldest_age_seconds
      FROM drainpipe.job_queue_stats_v1(p_queues) s
$$;
