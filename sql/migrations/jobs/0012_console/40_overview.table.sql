-- The table: the console's overview of each queue (docs/job-inbox.md#the-console): the live
-- rows (job_messages_live_idx), the finished ones' totals (35_totals), and for the series
-- only what moved in the last hour (index ranges): a job enqueued since then became
-- visible or finished since then too.
CREATE OR REPLACE FUNCTION drainpipe.job_queue_overview_v1(p_queues text[], p_now timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, counts jsonb, ready bigint, oldest_ready_age_s double precision,
               paused boolean, series jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_from timestamptz := date_trunc('minute', v_now) - interval '59 minutes';
    v_queue text;
    v_live jsonb;
    v_done jsonb;
    v_enqueued jsonb;
    v_enqueued_done jsonb;
    v_succeeded jsonb;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        -- the live jobs in one pass over their index range: counts by state, the ready
        -- ones and the oldest of them, and those enqueued in the last hour by minute
        SELECT jsonb_build_object('queued', sum(g.queued), 'leased', sum(g.leased),
                                  'retry_wait', sum(g.retry_wait), 'dead', sum(g.dead)),
               coalesce(sum(g.ready), 0),
               extract(epoch FROM v_now - min(g.oldest))::double precision,
               coalesce(jsonb_object_agg(extract(epoch FROM g.minute)::bigint::text, g.n)
                            FILTER (WHERE g.minute IS NOT NULL), '{}'::jsonb)
          INTO v_live, ready, oldest_ready_age_s, v_enqueued
          FROM (SELECT CASE WHEN l.enqueued_at >= v_from THEN date_trunc('minute', l.enqueued_at) END AS minute,
                       count(*) AS n,
                       count(*) FILTER (WHERE l.state = 'queued') AS queued,
                       count(*) FILTER (WHERE l.state = 'leased') AS leased,
                       count(*) FILTER (WHERE l.state = 'retry_wait') AS retry_wait,
                       count(*) FILTER (WHERE l.state = 'dead') AS dead,
                       count(*) FILTER (WHERE l.ready) AS ready,
                       min(l.visible_at) FILTER (WHERE l.ready) AS oldest
                  FROM (SELECT m.visible_at, m.enqueued_at,
                               drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, v_now) AS state,
                               m.visible_at <= v_now AND m.attempts < m.max_attempts AS ready
                          FROM drainpipe.job_messages m
                         WHERE m.queue = v_queue AND m.finished_at IS NULL) l
                 GROUP BY 1) g;
        -- the finished: the totals the triggers keep (35_totals)
        SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb) INTO v_done
          FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                 WHERE t.queue = v_queue GROUP BY t.state) s;
        -- dead from the live rows (a last lease that ran out) adds to the finished dead
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', coalesce((v_done ->> 'succeeded')::bigint, 0),
            'dead', coalesce((v_done ->> 'dead')::bigint, 0) + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', coalesce((v_done ->> 'cancelled')::bigint, 0));
        SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), '{}'::jsonb)
          INTO v_enqueued_done
          FROM (SELECT date_trunc('minute', f.enqueued_at) AS minute, count(*) AS n
                  FROM drainpipe.job_messages f
                 WHERE f.queue = v_queue AND f.finished_at >= v_from AND f.enqueued_at >= v_from
                 GROUP BY 1) e;
        SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), '{}'::jsonb)
          INTO v_succeeded
          FROM (SELECT date_trunc('minute', f.finished_at) AS minute, count(*) AS n
                  FROM drainpipe.job_messages f
                 WHERE f.queue = v_queue AND f.finished_at >= v_from AND f.state = 'succeeded'
                 GROUP BY 1) s;
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_enqueued_done, v_succeeded);
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        RETURN NEXT;
    END LOOP;
END
$$;

-- The table keeps every queue's totals from the migration on: nothing to set up per queue.
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_overview_v1(p_queues text[], p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN p_force THEN drainpipe.recount_job_totals_v1(p_queues) ELSE 0 END $$;
