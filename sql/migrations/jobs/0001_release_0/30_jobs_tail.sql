-- jobs: functions built on the backend's own ones, the same for pgmq and the table.

CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs(
    p_queue text, p_ids bigint[] DEFAULT NULL, p_batch integer DEFAULT 1000
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_count integer := 0;
BEGIN
    FOR v_id IN SELECT drainpipe.dead_job_ids(p_queue, p_ids, p_batch) LOOP
        -- a dead letter replayed by a concurrent call is skipped, not counted twice
        IF drainpipe.replay_dead_job(p_queue, v_id) IS NOT NULL THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END
$$;
