-- jobs 0019 on pgmq: purged archive rows take their steps and workflow rows with them;
-- the retention upkeep also purges events past event_retention (7 days).

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
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'WITH gone AS (
             DELETE FROM pgmq.%1$I a WHERE a.msg_id IN (
                 SELECT x.msg_id FROM pgmq.%1$I x
                  WHERE x.archived_at < clock_timestamp()
                        - CASE WHEN x.message ? ''dead'' THEN $1 ELSE $2 END
                  ORDER BY x.msg_id LIMIT $3)
             RETURNING a.msg_id),
         attempts_gone AS (
             DELETE FROM drainpipe.job_attempts t USING gone g WHERE t.queue = $4 AND t.job_id = g.msg_id)
         SELECT coalesce(array_agg(msg_id), ''{}'') FROM gone', 'a_' || p_queue)
      INTO v_ids USING p_dead_older_than, p_older_than, greatest(coalesce(p_batch, 10000), 1), p_queue;
    PERFORM drainpipe.forget_job_steps(p_queue, v_ids);
    RETURN cardinality(v_ids);
END
$$;

-- Archived jobs (completed and dead) past their queue's retention, with their attempt,
-- step and workflow rows; live jobs never. Events past 7 days go in the same run.
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
        CONTINUE WHEN to_regclass('pgmq.a_' || v_policy.queue) IS NULL;
        EXECUTE format(
            'WITH gone AS (DELETE FROM pgmq.%1$I d WHERE d.msg_id = ANY (ARRAY(
                 SELECT x.msg_id FROM pgmq.%1$I x WHERE x.archived_at < $1
                  ORDER BY x.msg_id LIMIT $2)) RETURNING d.msg_id),
                  attempts_gone AS (DELETE FROM drainpipe.job_attempts a USING gone g
                                     WHERE a.queue = $3 AND a.job_id = g.msg_id)
             SELECT coalesce(array_agg(msg_id), ''{}'') FROM gone', 'a_' || v_policy.queue)
          INTO v_ids
          USING v_now - make_interval(secs => v_policy.retention), greatest(coalesce(p_batch, 10000), 1),
                v_policy.queue;
        PERFORM drainpipe.forget_job_steps(v_policy.queue, v_ids);
        v_total := v_total + cardinality(v_ids);
    END LOOP;
    PERFORM drainpipe.purge_job_events_v1(604800, v_now);
    RETURN v_total;
END
$$;
