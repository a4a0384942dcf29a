-- pgmq: the table's job_flow_held (see there: two plans, one answer) over the queue's pgmq
-- table. A due job:
-- vt passed and attempts left (queued, or retry_wait once its wait is over); leased: read,
-- not failed since, vt ahead; every row of the queue table is live.
CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(
    p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamptz
)
RETURNS TABLE (id bigint, held_by text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table text := 'q_' || p_flow.queue;
    v_keyed boolean := p_flow.ordered OR p_flow.key_concurrency IS NOT NULL
                       OR p_flow.key_rate_count IS NOT NULL;
    v_leased bigint;
    v_claims bigint;
BEGIN
    IF to_regclass('pgmq.' || quote_ident(v_table)) IS NULL THEN
        RETURN;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM pgmq.%I l
                         WHERE l.read_ct > 0 AND l.vt > $1
                           AND (l.message ->> ''failed'') IS DISTINCT FROM (l.read_ct::text)',
                       v_table)
           INTO v_leased USING p_now;
    END IF;
    IF p_flow.rate_count IS NOT NULL THEN
        SELECT count(*) INTO v_claims FROM drainpipe.flow_claims c
         WHERE c.queue = p_flow.queue
           AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per);
    END IF;
    IF p_ids IS NOT NULL THEN
        RETURN QUERY EXECUTE format($q$
            WITH due AS MATERIALIZED (
                SELECT j.msg_id AS id,
                       CASE WHEN $4 THEN drainpipe.job_key(j.message -> 'payload') END AS key
                  FROM pgmq.%1$I j
                 WHERE j.vt <= $2
                   AND j.read_ct < coalesce((j.message ->> 'max_attempts')::integer, 5)
                   AND j.msg_id = ANY ($1)
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
                           WHEN $5 >= ($3).concurrency OR k.leased >= ($3).key_concurrency
                               THEN 'concurrency'
                           WHEN $6 >= ($3).rate_count OR k.claims >= ($3).key_rate_count
                               THEN 'rate'
                       END AS held_by
                  FROM due d LEFT JOIN keys k ON k.key = d.key
            ) h
            WHERE h.held_by IS NOT NULL
        $q$, v_table)
        USING p_ids, p_now, p_flow, v_keyed, v_leased, v_claims;
        RETURN;
    END IF;
    -- every due job: one pass per per-key limit grouped by key (see the table's)
    RETURN QUERY EXECUTE format($q$
        WITH due AS MATERIALIZED (  -- each key parsed once
            SELECT j.msg_id AS id,
                   CASE WHEN $3 THEN drainpipe.job_key(j.message -> 'payload') END AS key
              FROM pgmq.%1$I j
             WHERE j.vt <= $1
               AND j.read_ct < coalesce((j.message ->> 'max_attempts')::integer, 5)
        ),
        firsts AS (
            SELECT drainpipe.job_key(e.message -> 'payload') AS key, min(e.msg_id) AS first_id
              FROM pgmq.%1$I e
             WHERE ($2).ordered AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL
             GROUP BY 1
        ),
        leased AS (
            SELECT drainpipe.job_key(l.message -> 'payload') AS key, count(*) AS n
              FROM pgmq.%1$I l
             WHERE ($2).key_concurrency IS NOT NULL AND l.read_ct > 0 AND l.vt > $1
               AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
             GROUP BY 1
        ),
        claims AS (
            SELECT c.key, count(*) AS n
              FROM drainpipe.flow_claims c
             WHERE ($2).key_rate_count IS NOT NULL AND c.queue = ($2).queue
               AND c.key IS NOT NULL
               AND c.claimed_at > $1 - make_interval(secs => ($2).key_rate_per)
             GROUP BY 1
        )
        SELECT h.id, h.held_by FROM (
            SELECT d.id, CASE
                       WHEN f.first_id < d.id THEN 'order'
                       WHEN $4 >= ($2).concurrency OR l.n >= ($2).key_concurrency
                           THEN 'concurrency'
                       WHEN $5 >= ($2).rate_count OR c.n >= ($2).key_rate_count
                           THEN 'rate'
                   END AS held_by
              FROM due d
              LEFT JOIN firsts f ON f.key = d.key
              LEFT JOIN leased l ON l.key = d.key
              LEFT JOIN claims c ON c.key = d.key
        ) h
        WHERE h.held_by IS NOT NULL
    $q$, v_table)
    USING p_now, p_flow, v_keyed, v_leased, v_claims;
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
