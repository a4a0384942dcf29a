-- pgmq: the console's overview of each queue (docs/job-inbox.md#the-console), from the
-- queue's live table and its archive. Every part reads an index range: the counts of the
-- archive's dead and cancelled jobs two partial indexes (ensure_overview_indexes_v1; the
-- succeeded ones are the rest), and for the series only what moved in the last hour: a job
-- enqueued since then is visible (vt) or archived since then too.

-- The archive's partial indexes the overview counts with (dead, cancelled): built for the
-- existing queues below, and by the management app for its declared queues at its first
-- overview (CREATE INDEX IF NOT EXISTS: a no-op once they exist). Only the rare terminal
-- rows enter them: a success's archive insert evaluates the predicate and stores nothing.
CREATE OR REPLACE FUNCTION drainpipe.ensure_overview_indexes_v1(p_queues text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        CONTINUE WHEN to_regclass('pgmq.a_' || v_queue) IS NULL
                   OR (to_regclass('pgmq.' || quote_ident('a_' || v_queue || '_dead_all_idx')) IS NOT NULL
                       AND to_regclass('pgmq.' || quote_ident('a_' || v_queue || '_cancelled_idx')) IS NOT NULL);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''dead''',
                       'a_' || v_queue || '_dead_all_idx', 'a_' || v_queue);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''cancelled''',
                       'a_' || v_queue || '_cancelled_idx', 'a_' || v_queue);
    END LOOP;
END
$$;

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
    v_total bigint;
    v_dead bigint;
    v_cancelled bigint;
    v_enqueued jsonb;
    v_succeeded jsonb;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        IF to_regclass('pgmq.a_' || v_queue) IS NULL THEN
            counts := jsonb_build_object('queued', 0, 'leased', 0, 'retry_wait', 0,
                                         'succeeded', 0, 'dead', 0, 'cancelled', 0);
            ready := 0;
            oldest_ready_age_s := NULL;
            series := drainpipe.overview_series(v_queue, v_now, '{}', '{}');
            RETURN NEXT;
            CONTINUE;
        END IF;
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(s.state, s.n), ''{}''::jsonb)
               FROM (SELECT drainpipe.job_state_at(drainpipe.pgmq_live_state(q.read_ct, q.message), q.vt,
                                                   q.read_ct, coalesce((q.message ->> ''max_attempts'')::integer, 5), $1) AS state,
                            count(*) AS n
                       FROM pgmq.%I q GROUP BY 1) s', 'q_' || v_queue)
          INTO v_live USING v_now;
        EXECUTE format(
            'SELECT count(*), extract(epoch FROM $1 - min(q.vt))::double precision
               FROM pgmq.%I q
              WHERE q.vt <= $1 AND q.read_ct < coalesce((q.message ->> ''max_attempts'')::integer, 5)',
            'q_' || v_queue)
          INTO ready, oldest_ready_age_s USING v_now;
        EXECUTE format(
            'SELECT (SELECT count(*) FROM pgmq.%1$I),
                    (SELECT count(*) FROM pgmq.%1$I a WHERE a.message ? ''dead''),
                    (SELECT count(*) FROM pgmq.%1$I a WHERE a.message ? ''cancelled'')', 'a_' || v_queue)
          INTO v_total, v_dead, v_cancelled;
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', v_total - v_dead - v_cancelled,
            'dead', v_dead + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', v_cancelled);
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), ''{}''::jsonb)
               FROM (SELECT date_trunc(''minute'', x.enqueued_at) AS minute, count(*) AS n
                       FROM (SELECT q.enqueued_at FROM pgmq.%1$I q WHERE q.vt >= $1 AND q.enqueued_at >= $1
                             UNION ALL
                             SELECT a.enqueued_at FROM pgmq.%2$I a WHERE a.archived_at >= $1 AND a.enqueued_at >= $1) x
                      GROUP BY 1) e', 'q_' || v_queue, 'a_' || v_queue)
          INTO v_enqueued USING v_from;
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), ''{}''::jsonb)
               FROM (SELECT date_trunc(''minute'', a.archived_at) AS minute, count(*) AS n
                       FROM pgmq.%I a
                      WHERE a.archived_at >= $1 AND NOT a.message ? ''dead'' AND NOT a.message ? ''cancelled''
                      GROUP BY 1) s', 'a_' || v_queue)
          INTO v_succeeded USING v_from;
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_succeeded);
        RETURN NEXT;
    END LOOP;
END
$$;

DO $indexes$
BEGIN
    PERFORM drainpipe.ensure_overview_indexes_v1(ARRAY(
        SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'));
END
$indexes$;
