-- jobs 0019 on the table: purged records take their steps and workflow rows with them;
-- the retention upkeep also purges events past event_retention (7 days). Rows left behind
-- by records purged before this migration go now.

CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive_v1(
    p_queue text,
    p_older_than interval DEFAULT '7 days',
    p_batch integer DEFAULT 10000,
    p_dead_older_than interval DEFAULT '30 days'
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM drainpipe.job_messages d
         WHERE d.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NOT NULL
                  AND x.finished_at < clock_timestamp() - least(p_older_than, p_dead_older_than)
                  AND x.finished_at < clock_timestamp()
                      - CASE WHEN x.state = 'dead' THEN p_dead_older_than ELSE p_older_than END
                ORDER BY x.finished_at
                LIMIT greatest(coalesce(p_batch, 10000), 1)))
        RETURNING d.queue, d.id
    ), attempts_gone AS (
        DELETE FROM drainpipe.job_attempts a USING gone g
         WHERE a.queue = g.queue AND a.job_id = g.id
    )
    SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM gone;
    PERFORM drainpipe.forget_job_steps(p_queue, v_ids);
    RETURN cardinality(v_ids);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.apply_job_retention_v1(
    p_min_interval double precision DEFAULT NULL, p_batch integer DEFAULT 10000,
    p_now timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_policy drainpipe.queue_policies;
    v_total integer := 0;
    v_ids bigint[];
BEGIN
    IF p_min_interval IS NOT NULL THEN
        UPDATE drainpipe.job_retention_runs SET last_run = v_now
         WHERE id = 1 AND (last_run IS NULL OR last_run <= v_now - make_interval(secs => p_min_interval));
        IF NOT FOUND THEN
            RETURN NULL;  -- ran less than p_min_interval ago (or another caller runs it now)
        END IF;
    END IF;
    FOR v_policy IN SELECT * FROM drainpipe.queue_policies ORDER BY queue LOOP
        WITH gone AS (
            DELETE FROM drainpipe.job_messages d
             WHERE d.id = ANY (ARRAY(
                   SELECT x.id FROM drainpipe.job_messages x
                    WHERE x.queue = v_policy.queue AND x.finished_at IS NOT NULL
                      AND x.finished_at < v_now - make_interval(secs => v_policy.retention)
                    ORDER BY x.finished_at LIMIT greatest(coalesce(p_batch, 10000), 1)))
            RETURNING d.queue, d.id
        ), attempts_gone AS (
            DELETE FROM drainpipe.job_attempts a USING gone g
             WHERE a.queue = g.queue AND a.job_id = g.id
        )
        SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM gone;
        PERFORM drainpipe.forget_job_steps(v_policy.queue, v_ids);
        v_total := v_total + cardinality(v_ids);
    END LOOP;
    PERFORM drainpipe.purge_job_events_v1(604800, v_now);
    RETURN v_total;
END
$$;

DELETE FROM drainpipe.job_steps s
 WHERE NOT EXISTS (SELECT 1 FROM drainpipe.job_messages m WHERE m.queue = s.queue AND m.id = s.job_id);
DELETE FROM drainpipe.job_workflows w
 WHERE NOT EXISTS (SELECT 1 FROM drainpipe.job_messages m WHERE m.queue = w.queue AND m.id = w.job_id);
