-- jobs 0018: held counts (docs/flow-control.md#what-held-means, docs/reference.md section
-- 14). job_queue_stats_v4 is v3 plus held, the queue's due jobs a claim would not take now,
-- by reason: all of them ("paused") while the queue is paused, else those its flow limits
-- hold (job_flow_held, per storage). job_flow_holds_v1 (JobRecord.held_by) is replaced,
-- same signature and rows, by the same rules, so a record's held_by and the counts agree:
-- a retry_wait job whose wait is over is held as a queued one is; a job not due yet is not
-- held (nothing would claim it yet anyway).

DO $types$
BEGIN
    IF to_regtype('drainpipe.job_queue_stats_v4') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v4 AS (
            queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
            succeeded bigint, cancelled bigint, oldest_age_seconds double precision,
            paused boolean, held jsonb
        );
    END IF;
END
$types$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v4(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v4
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.succeeded, s.cancelled,
           s.oldest_age_seconds, s.paused,
           CASE WHEN s.paused THEN
                    CASE WHEN s.ready > 0 THEN jsonb_build_object('paused', s.ready)
                         ELSE '{}'::jsonb END
                WHEN s.ready = 0 THEN '{}'::jsonb
                ELSE coalesce((
                    SELECT jsonb_object_agg(h.held_by, h.n)
                      FROM (SELECT x.held_by, count(*) AS n
                              FROM drainpipe.queue_flow f
                             CROSS JOIN LATERAL drainpipe.job_flow_held(f, NULL, clock_timestamp()) x
                             WHERE f.queue = s.queue
                             GROUP BY x.held_by) h), '{}'::jsonb)
           END
      FROM drainpipe.job_queue_stats_v3(p_queues) s
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_holds_v1(
    p_queues text[], p_ids bigint[], p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (queue text, id bigint, held_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_flow drainpipe.queue_flow;
BEGIN
    FOR v_flow IN SELECT f.* FROM drainpipe.queue_flow f WHERE f.queue = ANY (p_queues) LOOP
        RETURN QUERY
        SELECT v_flow.queue, x.id, x.held_by
          FROM drainpipe.job_flow_held(
                   v_flow,
                   ARRAY(SELECT w.id FROM unnest(p_queues, p_ids) AS w(queue, id)
                          WHERE w.queue = v_flow.queue),
                   v_now) x;
    END LOOP;
END
$$;

-- The drain route's report on the queues that gave it no work: whether each is paused and
-- its held counts as job_queue_stats_v4 has them, without the rest of the stats (the
-- finished records are not counted): a primary-key probe for a queue neither paused nor
-- limited, the due jobs counted for a paused one, job_flow_held for a limited one.
CREATE OR REPLACE FUNCTION drainpipe.job_queue_holds_v1(p_queues text[])
RETURNS TABLE (queue text, paused boolean, held jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_queue text;
    v_due bigint;
    v_flow drainpipe.queue_flow;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        held := '{}'::jsonb;
        IF paused THEN
            v_due := drainpipe.job_queue_due(v_queue, v_now);
            IF v_due > 0 THEN
                held := jsonb_build_object('paused', v_due);
            END IF;
        ELSE
            SELECT f.* INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = v_queue;
            IF FOUND THEN
                SELECT coalesce(jsonb_object_agg(h.held_by, h.n), '{}'::jsonb) INTO held
                  FROM (SELECT x.held_by, count(*) AS n
                          FROM drainpipe.job_flow_held(v_flow, NULL, v_now) x
                         GROUP BY x.held_by) h;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
