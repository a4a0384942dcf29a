-- pgmq: the table's job_flow_held (see there) over the queue's pgmq table. A due job:
-- vt passed and attempts left (queued, or retry_wait once its wait is over); leased: read,
-- not failed since, vt ahead; every row of the queue table is live.
CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(
    p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamptz
)
RETURNS TABLE (id bigint, held_by text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regclass('pgmq.' || quote_ident('q_' || p_flow.queue)) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT j.msg_id AS id, drainpipe.job_key(j.message -> 'payload') AS key
              FROM pgmq.%1$I j
             WHERE j.vt <= $2
               AND j.read_ct < coalesce((j.message ->> 'max_attempts')::integer, 5)
               AND ($1 IS NULL OR j.msg_id = ANY ($1))
        ),
        whole AS (
            SELECT CASE WHEN ($3).concurrency IS NOT NULL THEN (
                       SELECT count(*) FROM pgmq.%1$I l
                        WHERE l.read_ct > 0 AND l.vt > $2
                          AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text))
                   END AS leased,
                   CASE WHEN ($3).rate_count IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.flow_claims c
                        WHERE c.queue = ($3).queue
                          AND c.claimed_at > $2 - make_interval(secs => ($3).rate_per))
                   END AS claims
        ),
        keys AS (
            SELECT k.key,
                   CASE WHEN ($3).ordered THEN (
                       SELECT min(e.msg_id) FROM pgmq.%1$I e
                        WHERE drainpipe.job_key(e.message -> 'payload') = k.key
                          AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL)
                   END AS first_id,
                   CASE WHEN ($3).key_concurrency IS NOT NULL THEN (
                       SELECT count(*) FROM pgmq.%1$I l
                        WHERE drainpipe.job_key(l.message -> 'payload') = k.key
                          AND l.read_ct > 0 AND l.vt > $2
                          AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text))
                   END AS leased,
                   CASE WHEN ($3).key_rate_count IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.flow_claims c
                        WHERE c.queue = ($3).queue AND c.key = k.key
                          AND c.claimed_at > $2 - make_interval(secs => ($3).key_rate_per))
                   END AS claims
              FROM (SELECT DISTINCT d.key FROM due d WHERE d.key IS NOT NULL) k
        )
        SELECT h.id, h.held_by FROM (
            SELECT d.id, CASE
                       WHEN k.first_id < d.id THEN 'order'
                       WHEN w.leased >= ($3).concurrency OR k.leased >= ($3).key_concurrency
                           THEN 'concurrency'
                       WHEN w.claims >= ($3).rate_count OR k.claims >= ($3).key_rate_count
                           THEN 'rate'
                   END AS held_by
              FROM due d CROSS JOIN whole w LEFT JOIN keys k ON k.key = d.key
        ) h
        WHERE h.held_by IS NOT NULL
    $q$, 'q_' || p_flow.queue)
    USING p_ids, p_now, p_flow;
END
$$;

-- The table's job_queue_due (see there) over the queue's pgmq table.
CREATE OR REPLACE FUNCTION drainpipe.job_queue_due(p_queue text, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_due bigint;
BEGIN
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM pgmq.%I j
                     WHERE j.vt <= $1
                       AND j.read_ct < coalesce((j.message ->> ''max_attempts'')::integer, 5)',
                   'q_' || p_queue)
       INTO v_due USING p_now;
    RETURN v_due;
END
$$;
