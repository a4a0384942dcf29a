-- pgmq: the console's overview of each queue (docs/job-inbox.md#the-console), from the
-- queue's live table, the kept totals of its archive, and for the series only what moved
-- in the last hour (index ranges): a job enqueued since then is visible (vt) or archived
-- since then too.

-- The archive's totals (jobs 0012's job_totals): a pgmq queue finishes a job by inserting
-- it into its archive, and retention and purge delete from there, so a statement trigger
-- on each of those counts them.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_job_totals()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rows jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('queue', substr(TG_TABLE_NAME, 3), 'state', c.state, 'n', c.n))
          INTO v_rows
          FROM (SELECT CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                            WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS state,
                       count(*) AS n
                  FROM added a GROUP BY 1) c;
    ELSE
        SELECT jsonb_agg(jsonb_build_object('queue', substr(TG_TABLE_NAME, 3), 'state', c.state, 'n', -c.n))
          INTO v_rows
          FROM (SELECT CASE WHEN g.message ? 'cancelled' THEN 'cancelled'
                            WHEN g.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS state,
                       count(*) AS n
                  FROM gone g GROUP BY 1) c;
    END IF;
    IF v_rows IS NOT NULL THEN
        PERFORM drainpipe.add_job_totals(v_rows);
    END IF;
    RETURN NULL;
END
$$;

-- Count p_queues' totals again from their archives and keep them from now on (the
-- triggers, created when missing): writers of each archive wait between its count and the
-- commit. The migration does it for the existing queues, the management app for its
-- declared queues at its first overview (a queue kept already is skipped unless p_force);
-- a queue not kept yet is counted from its records on every overview.
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_overview_v1(p_queues text[], p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
    v_table regclass;
    v_total bigint := 0;
    v_counted bigint;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        CONTINUE WHEN to_regclass('pgmq.a_' || v_queue) IS NULL;
        CONTINUE WHEN NOT p_force AND EXISTS (SELECT 1 FROM drainpipe.job_totals_kept k WHERE k.queue = v_queue);
        v_table := ('pgmq.' || quote_ident('a_' || v_queue))::regclass;
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', v_table);
        DELETE FROM drainpipe.job_totals WHERE queue = v_queue;
        EXECUTE format(
            'INSERT INTO drainpipe.job_totals (queue, state, shard, n)
             SELECT $1, CASE WHEN a.message ? ''cancelled'' THEN ''cancelled''
                             WHEN a.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END, 0, count(*)
               FROM %s a GROUP BY 2', v_table) USING v_queue;
        SELECT coalesce(sum(n), 0) INTO v_counted FROM drainpipe.job_totals WHERE queue = v_queue;
        v_total := v_total + v_counted;
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_totals_insert' AND tgrelid = v_table) THEN
            EXECUTE format('CREATE TRIGGER drainpipe_totals_insert AFTER INSERT ON %s
                              REFERENCING NEW TABLE AS added FOR EACH STATEMENT
                              EXECUTE FUNCTION drainpipe.pgmq_job_totals()', v_table);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_totals_delete' AND tgrelid = v_table) THEN
            EXECUTE format('CREATE TRIGGER drainpipe_totals_delete AFTER DELETE ON %s
                              REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
                              EXECUTE FUNCTION drainpipe.pgmq_job_totals()', v_table);
        END IF;
        INSERT INTO drainpipe.job_totals_kept (queue) VALUES (v_queue) ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN v_total;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.recount_job_totals_v1(p_queues text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.ensure_queue_overview_v1(coalesce(p_queues, ARRAY(
        SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$')), true)
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
    v_done jsonb;
    v_enqueued jsonb;
    v_enqueued_done jsonb;
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
            series := drainpipe.overview_series(v_queue, v_now, '{}', '{}', '{}');
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- the live jobs in one pass: counts by state, the ready ones and the oldest of
        -- them, and those enqueued in the last hour by minute; a job never claimed is
        -- queued (and ready once visible) without reading its document
        EXECUTE format(
            'SELECT jsonb_build_object(''queued'', sum(g.queued), ''leased'', sum(g.leased),
                                       ''retry_wait'', sum(g.retry_wait), ''dead'', sum(g.dead)),
                    coalesce(sum(g.ready), 0),
                    extract(epoch FROM $1 - min(g.oldest))::double precision,
                    coalesce(jsonb_object_agg(extract(epoch FROM g.minute)::bigint::text, g.n)
                                 FILTER (WHERE g.minute IS NOT NULL), ''{}''::jsonb)
               FROM (SELECT CASE WHEN l.enqueued_at >= $2 THEN date_trunc(''minute'', l.enqueued_at) END AS minute,
                            count(*) AS n,
                            count(*) FILTER (WHERE l.state = ''queued'') AS queued,
                            count(*) FILTER (WHERE l.state = ''leased'') AS leased,
                            count(*) FILTER (WHERE l.state = ''retry_wait'') AS retry_wait,
                            count(*) FILTER (WHERE l.state = ''dead'') AS dead,
                            count(*) FILTER (WHERE l.ready) AS ready,
                            min(l.vt) FILTER (WHERE l.ready) AS oldest
                       FROM (SELECT q.vt, q.enqueued_at,
                                    CASE WHEN q.read_ct = 0 THEN ''queued''
                                         ELSE drainpipe.job_state_at(drainpipe.pgmq_live_state(q.read_ct, q.message), q.vt,
                                                  q.read_ct, coalesce((q.message ->> ''max_attempts'')::integer, 5), $1)
                                    END AS state,
                                    q.vt <= $1 AND CASE WHEN q.read_ct = 0 THEN true
                                                        ELSE q.read_ct < coalesce((q.message ->> ''max_attempts'')::integer, 5)
                                                   END AS ready
                               FROM pgmq.%I q) l
                      GROUP BY 1) g', 'q_' || v_queue)
          INTO v_live, ready, oldest_ready_age_s, v_enqueued USING v_now, v_from;
        -- the finished: the kept totals, or (a queue not kept yet) a count of the archive
        v_done := drainpipe.kept_job_totals(v_queue);
        IF v_done IS NULL THEN
            EXECUTE format(
                'SELECT coalesce(jsonb_object_agg(s.state, s.n), ''{}''::jsonb)
                   FROM (SELECT CASE WHEN a.message ? ''cancelled'' THEN ''cancelled''
                                     WHEN a.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END AS state,
                                count(*) AS n
                           FROM pgmq.%I a GROUP BY 1) s', 'a_' || v_queue)
              INTO v_done;
        END IF;
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', coalesce((v_done ->> 'succeeded')::bigint, 0),
            'dead', coalesce((v_done ->> 'dead')::bigint, 0) + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', coalesce((v_done ->> 'cancelled')::bigint, 0));
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), ''{}''::jsonb)
               FROM (SELECT date_trunc(''minute'', a.enqueued_at) AS minute, count(*) AS n
                       FROM pgmq.%I a WHERE a.archived_at >= $1 AND a.enqueued_at >= $1
                      GROUP BY 1) e', 'a_' || v_queue)
          INTO v_enqueued_done USING v_from;
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), ''{}''::jsonb)
               FROM (SELECT date_trunc(''minute'', a.archived_at) AS minute, count(*) AS n
                       FROM pgmq.%I a
                      WHERE a.archived_at >= $1 AND NOT a.message ? ''dead'' AND NOT a.message ? ''cancelled''
                      GROUP BY 1) s', 'a_' || v_queue)
          INTO v_succeeded USING v_from;
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_enqueued_done, v_succeeded);
        RETURN NEXT;
    END LOOP;
END
$$;

DO $totals$
BEGIN
    PERFORM drainpipe.ensure_queue_overview_v1(ARRAY(
        SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'));
END
$totals$;
