-- list_jobs_v2: newest first by enqueued_at, then id, then queue, across queues
-- (docs/reference.md, job records). pgmq numbers each queue on its own, so list_jobs_v1's
-- (id, queue) order put a fresh job of a quiet queue behind every older job of a busy one.
-- v1 stays as it was for the previous release.
--
-- Each queue's live and archive tables get an index on (enqueued_at, msg_id): a page reads
-- at most a page from each of them, backwards, and sorts those few rows
-- (tests/admin/test_list_plan.py). Plain CREATE INDEX: sends to a queue wait while its
-- tables are read (build them CONCURRENTLY by hand first on a large archive; the migration
-- then finds them).
CREATE OR REPLACE FUNCTION drainpipe.pgmq_enqueued_indexes(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id)',
                   'q_' || p_queue || '_enqueued_idx', 'q_' || p_queue);
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id)',
                   'a_' || p_queue || '_enqueued_idx', 'a_' || p_queue);
END
$$;

-- 0004's, plus the listing's indexes for a new queue.
CREATE OR REPLACE FUNCTION drainpipe.ensure_job_queue_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        PERFORM pgmq.create(p_queue);
    END IF;
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I ((message ->> ''dedupe_key'')) WHERE message ? ''dedupe_key''',
                   'q_' || p_queue || '_dedupe_idx', 'q_' || p_queue);
    -- dead jobs not replayed yet, newest first (list_dead, retry_dead, stats)
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''dead'' AND NOT message ? ''replayed_by''',
                   'a_' || p_queue || '_unreplayed_idx', 'a_' || p_queue);
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'a_' || p_queue || '_dead_idx');
    PERFORM drainpipe.pgmq_enqueued_indexes(p_queue);
    IF to_regprocedure('drainpipe.claim_jobs__' || p_queue || '(double precision, integer, timestamptz)') IS NULL
       OR to_regprocedure('drainpipe.complete_jobs__' || p_queue || '(bigint[], integer[], timestamptz)') IS NULL THEN
        PERFORM drainpipe.define_job_queue_functions_v1(p_queue);
    END IF;
END
$$;

DO $indexes$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regclass('pgmq.q_' || v_queue) IS NOT NULL AND to_regclass('pgmq.a_' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.pgmq_enqueued_indexes(v_queue);
        END IF;
    END LOOP;
END
$indexes$;

-- One queue's records as SQL text, newest first by (enqueued_at, msg_id), with the
-- parameters $1 state, $2 tenant, $3 before enqueued_at, $4 before id, $5 before queue,
-- $6 now, $7 limit. A row is after the cursor when (enqueued_at, id, queue) is below
-- (before_at, before_id, before_queue): for this queue that is (enqueued_at, id) below
-- (before_at, before_id), or at most it when the queue's name sorts before the cursor's.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_records_newest_sql(p_queue text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format($sql$
        (SELECT * FROM (
            SELECT m.msg_id AS id, %1$L::text AS queue,
                   drainpipe.pgmq_live_state(m.read_ct, m.message) AS stored_state,
                   m.read_ct AS attempts, coalesce((m.message ->> 'max_attempts')::integer, 5) AS max_attempts,
                   drainpipe.job_tenant(m.message -> 'payload') AS tenant,
                   m.message ->> 'dedupe_key' AS dedupe_key, m.enqueued_at, m.vt AS lease_end,
                   %4$s AS started_at, NULL::timestamptz AS finished_at,
                   m.message ->> 'last_code' AS last_code, (m.message ->> 'parent_id')::bigint AS parent_id,
                   NULL::bigint AS replayed_by
              FROM pgmq.%2$I m
             WHERE ($3::timestamptz IS NULL
                    OR (m.enqueued_at, m.msg_id) < ($3, $4 + CASE WHEN %1$L < $5 THEN 1 ELSE 0 END))
               AND ($2::text IS NULL OR drainpipe.job_tenant(m.message -> 'payload') = $2)
             ORDER BY m.enqueued_at DESC, m.msg_id DESC) l
          WHERE $1::text IS NULL
             OR drainpipe.job_state_at(l.stored_state, l.lease_end, l.attempts, l.max_attempts, $6) = $1
          LIMIT $7)
        UNION ALL
        (SELECT * FROM (
            SELECT a.msg_id, %1$L::text,
                   CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                        WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END,
                   a.read_ct, coalesce((a.message ->> 'max_attempts')::integer, 5),
                   drainpipe.job_tenant(a.message -> 'payload'),
                   a.message ->> 'dedupe_key', a.enqueued_at, a.vt, %5$s, a.archived_at,
                   CASE WHEN a.message ? 'cancelled' OR a.message ? 'dead' THEN a.message ->> 'last_code'
                        ELSE a.message ->> 'skipped' END,
                   (a.message ->> 'parent_id')::bigint,
                   (a.message ->> 'replayed_by')::bigint
              FROM pgmq.%3$I a
             WHERE ($3::timestamptz IS NULL
                    OR (a.enqueued_at, a.msg_id) < ($3, $4 + CASE WHEN %1$L < $5 THEN 1 ELSE 0 END))
               AND ($2::text IS NULL OR drainpipe.job_tenant(a.message -> 'payload') = $2)
               AND ($1::text IS NULL OR $1 = CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                                                  WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END)
             ORDER BY a.enqueued_at DESC, a.msg_id DESC) t
          LIMIT $7)
    $sql$, p_queue, 'q_' || p_queue, 'a_' || p_queue,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'm.last_read_at' ELSE 'NULL::timestamptz' END,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'a.last_read_at' ELSE 'NULL::timestamptz' END)
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v2(
    p_queue text DEFAULT NULL,
    p_state text DEFAULT NULL,
    p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_before_at timestamptz DEFAULT NULL,
    p_before_id bigint DEFAULT NULL,
    p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parts text;
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    SELECT string_agg(drainpipe.pgmq_records_newest_sql(m.queue_name), ' UNION ALL ')
      INTO v_parts
      FROM pgmq.meta m
     WHERE m.queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'
       AND (p_queue IS NULL OR m.queue_name = p_queue)
       AND to_regclass('pgmq.a_' || m.queue_name) IS NOT NULL;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        SELECT r.id, r.queue, r.read_state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
               r.dedupe_key, r.enqueued_at,
               CASE WHEN r.read_state IN ('queued', 'retry_wait') THEN r.lease_end END,
               r.started_at,
               CASE WHEN r.read_state = 'dead' AND r.finished_at IS NULL THEN r.lease_end ELSE r.finished_at END,
               CASE WHEN r.read_state = r.stored_state THEN r.last_code
                    WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END,
               r.parent_id, r.replayed_by, NULL::jsonb
          FROM (SELECT u.*, drainpipe.job_state_at(u.stored_state, u.lease_end, u.attempts,
                                                   u.max_attempts, $6) AS read_state
                  FROM (%s) u) r
         ORDER BY r.enqueued_at DESC, r.id DESC, r.queue DESC
         LIMIT $7
    $sql$, v_parts)
      USING p_state, p_tenant, p_before_at, coalesce(p_before_id, 0), coalesce(p_before_queue, ''),
            coalesce(p_now, clock_timestamp()), greatest(coalesce(p_limit, 100), 1);
END
$$;
