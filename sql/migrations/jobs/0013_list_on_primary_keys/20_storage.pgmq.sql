-- pgmq: ids and stamps drawn together (10_stamps.sql), the listing on each queue's primary
-- keys (live and archive, one id sequence), and 0010's indexes on (enqueued_at, msg_id)
-- replaced: every claim and settle paid an entry in the live one, every archive in the other.
--
-- pgmq's own default stamps a job with its transaction's start (now()), which can be any
-- time before its id is drawn. The live table's default becomes clock_timestamp(), read
-- right after the id in the same row, for jobs sent with pgmq.send; drainpipe's enqueues
-- stamp as 10_stamps.sql says. Jobs already stored keep their stamps: each queue keeps a
-- partial index on (enqueued_at, msg_id) for the ids drawn before this migration
-- (pgmq_list_before), read as 0010 read its indexes; later ids never enter it.

CREATE TABLE IF NOT EXISTS drainpipe.pgmq_list_before (
    queue text PRIMARY KEY,
    -- ids up to this one were stamped by now(): listed from the partial index
    last_id bigint NOT NULL
);
ALTER TABLE drainpipe.pgmq_list_before ENABLE ROW LEVEL SECURITY;

-- One queue: the live table's default, and 0010's indexes swapped for partial ones over the
-- ids drawn so far. The ALTER waits for the queue's writers, so no id drawn before it
-- is stamped after it. Re-runnable: a queue done once (or made after this) is left alone.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_list_by_ids(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_stamped boolean;
    v_last bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid) = 'clock_timestamp()' INTO v_stamped
      FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
     WHERE d.adrelid = format('pgmq.%I', 'q_' || p_queue)::regclass AND a.attname = 'enqueued_at';
    IF coalesce(v_stamped, false)
       AND to_regclass(format('pgmq.%I', 'q_' || p_queue || '_enqueued_idx')) IS NULL
       AND to_regclass(format('pgmq.%I', 'a_' || p_queue || '_enqueued_idx')) IS NULL THEN
        RETURN;  -- done already, or made after this migration
    END IF;
    EXECUTE format('ALTER TABLE pgmq.%I ALTER COLUMN enqueued_at SET DEFAULT clock_timestamp()',
                   'q_' || p_queue);
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgmq.%I',
                   'q_' || p_queue || '_msg_id_seq')
      INTO v_last;
    IF v_last > 0 AND NOT EXISTS (SELECT 1 FROM drainpipe.pgmq_list_before b WHERE b.queue = p_queue) THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id) WHERE msg_id <= %s',
                       'q_' || p_queue || '_old_enqueued', 'q_' || p_queue, v_last);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id) WHERE msg_id <= %s',
                       'a_' || p_queue || '_old_enqueued', 'a_' || p_queue, v_last);
        INSERT INTO drainpipe.pgmq_list_before (queue, last_id) VALUES (p_queue, v_last);
    END IF;
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'q_' || p_queue || '_enqueued_idx');
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'a_' || p_queue || '_enqueued_idx');
END
$$;

-- 0010's, the listing's indexes no longer made: a new queue lists by ids alone.
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
    PERFORM drainpipe.pgmq_list_by_ids(p_queue);
    IF to_regprocedure('drainpipe.claim_jobs__' || p_queue || '(double precision, integer, timestamptz)') IS NULL
       OR to_regprocedure('drainpipe.complete_jobs__' || p_queue || '(bigint[], integer[], timestamptz)') IS NULL THEN
        PERFORM drainpipe.define_job_queue_functions_v1(p_queue);
    END IF;
END
$$;

DO $queues$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regclass('pgmq.q_' || v_queue) IS NOT NULL AND to_regclass('pgmq.a_' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.pgmq_list_by_ids(v_queue);
        END IF;
    END LOOP;
END
$queues$;

-- -- enqueue: signatures, checks and results as 0002 --------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job_v1(
    p_queue text,
    p_payload jsonb DEFAULT '{}',
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5,
    p_dedupe_key text DEFAULT NULL,
    p_dedupe_running boolean DEFAULT true
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_message jsonb;
    v_table text := 'q_' || p_queue;
    v_id bigint;
    v_stamp drainpipe.job_stamp_v1;
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_dedupe_key IS NULL AND p_max_attempts >= 1 THEN
        -- the common case, built here: job_message() is a function call more per enqueue
        v_message := jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb),
                                        'max_attempts', p_max_attempts);
    ELSE
        v_message := drainpipe.job_message(p_payload, p_max_attempts, p_dedupe_key);
    END IF;
    IF to_regclass('pgmq.' || v_table) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    IF p_dedupe_key IS NOT NULL THEN
        -- one enqueuer per (queue, key) at a time, so two callers cannot both miss each other
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.job:' || p_queue), hashtext(p_dedupe_key));
        EXECUTE format(
            'SELECT msg_id FROM pgmq.%I
              WHERE message ? ''dedupe_key'' AND message ->> ''dedupe_key'' = $1
                AND ($2 OR read_ct = 0)
                AND NOT (read_ct >= coalesce((message ->> ''max_attempts'')::integer, 5) AND vt <= clock_timestamp())
              ORDER BY msg_id LIMIT 1', v_table)
          INTO v_id USING p_dedupe_key, p_dedupe_running;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    v_stamp := drainpipe.job_stamp(format('pgmq.%I', v_table || '_msg_id_seq')::regclass);
    EXECUTE format('INSERT INTO pgmq.%I (msg_id, enqueued_at, vt, message) OVERRIDING SYSTEM VALUE
                    VALUES ($1, $2, $3, $4)', v_table)
      USING v_stamp.id, v_stamp.at,
            clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), v_message;
    RETURN v_stamp.id;
END
$$;

-- Many jobs: the ids and their stamps in one pass, in payload order (see the table's).
CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs_v1(
    p_queue text,
    p_payloads jsonb,
    p_delay double precision DEFAULT 0,
    p_max_attempts integer DEFAULT 5
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH drawn AS MATERIALIZED (
             SELECT e.n, e.value, clock_timestamp() AS before_at, nextval($4) AS id,
                    clock_timestamp() AS at
               FROM jsonb_array_elements($3) WITH ORDINALITY AS e(value, n)
              ORDER BY e.n
         ), stamped AS (
             SELECT d.n, d.value, d.id, d.at,
                    CASE WHEN d.at - d.before_at > $5
                         THEN drainpipe.job_stamp($4) END AS again
               FROM drawn d
             OFFSET 0
         )
         INSERT INTO pgmq.%I (msg_id, enqueued_at, vt, message) OVERRIDING SYSTEM VALUE
         SELECT coalesce((s.again).id, s.id), coalesce((s.again).at, s.at), $1,
                jsonb_build_object(''payload'', s.value, ''max_attempts'', $2)
           FROM stamped s
          ORDER BY s.n
         RETURNING msg_id', 'q_' || p_queue)
      USING clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), p_max_attempts,
            p_payloads, format('pgmq.%I', 'q_' || p_queue || '_msg_id_seq')::regclass,
            drainpipe.job_stamp_window();
END
$$;

-- -- the listing --------------------------------------------------------------------------

-- (shapes of these two helpers in a draft of this migration, so a database that ran it
-- takes these without "cannot change return type" or two overloads)
DROP FUNCTION IF EXISTS drainpipe.pgmq_records_ids_sql(text, bigint, bigint);
DROP FUNCTION IF EXISTS drainpipe.pgmq_newest_window(text, text, text, integer, timestamptz, bigint,
                                                     timestamptz, bigint);

-- One queue's jobs as SQL text, newest first by (enqueued_at, msg_id), with ids from p_from
-- to p_to (NULL: no bound) or among p_ids, live and archived, with 0010's parameters: $1 state, $2 tenant,
-- $3 before enqueued_at, $4 before id, $5 before queue, $6 now, $7 limit. Over the ids of
-- pgmq_list_before, the partial indexes give that order; pgmq_newest_window names the
-- ids of the rest of the page, found on the primary keys.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_records_ids_sql(p_queue text, p_from bigint, p_to bigint,
                                                          p_ids bigint[] DEFAULT NULL)
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
             WHERE %6$s AND ($3::timestamptz IS NULL
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
             WHERE %7$s AND ($3::timestamptz IS NULL
                    OR (a.enqueued_at, a.msg_id) < ($3, $4 + CASE WHEN %1$L < $5 THEN 1 ELSE 0 END))
               AND ($2::text IS NULL OR drainpipe.job_tenant(a.message -> 'payload') = $2)
               AND ($1::text IS NULL OR $1 = CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                                                  WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END)
             ORDER BY a.enqueued_at DESC, a.msg_id DESC) t
          LIMIT $7)
    $sql$, p_queue, 'q_' || p_queue, 'a_' || p_queue,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'm.last_read_at' ELSE 'NULL::timestamptz' END,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'a.last_read_at' ELSE 'NULL::timestamptz' END,
       concat_ws(' AND ', 'true', 'm.msg_id >= ' || p_from, 'm.msg_id <= ' || p_to,
                 'm.msg_id = ANY (' || quote_literal(p_ids::text) || '::bigint[])'),
       concat_ws(' AND ', 'true', 'a.msg_id >= ' || p_from, 'a.msg_id <= ' || p_to,
                 'a.msg_id = ANY (' || quote_literal(p_ids::text) || '::bigint[])'))
$$;


-- The ids of one queue a page needs, above p_after (pgmq_list_before's): [low, top), NULL
-- for no bound. p_before_id is this queue's side of the cursor (0010's $4 + 1 when the
-- queue's name sorts before the cursor's). Ids stamped as 10_stamps.sql says: the top is
-- a job a window newer than the cursor (a binary search on the primary keys), the walk
-- down is the table's (job_records_newest), over the live and archive tables together.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_newest_window(
    p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamptz,
    p_before_id bigint, p_now timestamptz, p_after bigint, OUT low bigint, OUT top bigint,
    OUT ids bigint[]
)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
-- walks in id order, whatever the statistics say (a fresh queue has none): the primary
-- keys read in order and merged, never a table read whole and sorted
SET enable_sort = off
SET enable_seqscan = off
-- (the cost of a path turned off is not a reason to compile the query)
SET jit = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_window interval := drainpipe.job_stamp_window();
    v_limit integer := greatest(coalesce(p_limit, 100), 1);
    v_id bigint;
    v_at timestamptz;
    v_chunk integer := 2 * v_limit + 64;
    v_read integer;
    v_last bigint;
    v_bound timestamptz;
    v_newest drainpipe.job_stamp_v1[] := '{}';  -- the page's rows so far, newest first
BEGIN
    IF p_before_at IS NOT NULL THEN
        -- the newest id (above p_after) and its stamp
        EXECUTE format('SELECT u.id, u.at FROM (SELECT msg_id AS id, enqueued_at AS at FROM pgmq.%1$I
                                                UNION ALL
                                                SELECT msg_id, enqueued_at FROM pgmq.%2$I) u
                         WHERE u.id > $1 ORDER BY u.id DESC LIMIT 1',
                       'q_' || p_queue, 'a_' || p_queue)
          INTO v_id, v_at USING p_after;
        IF v_at >= p_before_at + v_window THEN
            -- a binary search down the ids for a lower one as new, in one statement
            EXECUTE format(
                'WITH RECURSIVE s (lo, hi, best) AS (
                     SELECT $2::bigint, $3::bigint, $3::bigint
                     UNION ALL
                     SELECT CASE WHEN f.id < s.hi AND f.at < $1 THEN f.id + 1 ELSE s.lo END,
                            CASE WHEN f.id < s.hi AND f.at < $1 THEN s.hi ELSE m.mid END,
                            CASE WHEN f.id < s.hi AND f.at >= $1 THEN f.id ELSE s.best END
                       FROM s
                       CROSS JOIN LATERAL (SELECT s.lo + (s.hi - s.lo) / 2 AS mid) m
                       CROSS JOIN LATERAL (
                           SELECT u.id, u.at
                             FROM (SELECT msg_id AS id, enqueued_at AS at FROM pgmq.%1$I
                                   UNION ALL
                                   SELECT msg_id, enqueued_at FROM pgmq.%2$I) u
                            WHERE u.id >= m.mid ORDER BY u.id LIMIT 1) f
                      WHERE s.lo < s.hi)
                 SELECT min(best) FROM s', 'q_' || p_queue, 'a_' || p_queue)
              INTO top USING p_before_at + v_window, p_after + 1, v_id;
        END IF;
    END IF;
    low := top;
    LOOP
        EXECUTE format(
            'SELECT count(*)::integer, min(w.id),
                    ARRAY(SELECT x FROM unnest($9 || array_agg(ROW(w.id, w.at)::drainpipe.job_stamp_v1)
                                                               FILTER (WHERE w.fits)) x
                           ORDER BY x.at DESC, x.id DESC LIMIT $10)
               FROM (SELECT c.id, c.at,
                            ($3::timestamptz IS NULL OR (c.at, c.id) < ($3, $4))
                            AND ($2::text IS NULL OR drainpipe.job_tenant(c.message -> ''payload'') = $2)
                            AND ($1::text IS NULL OR $1 = CASE
                                WHEN c.live THEN drainpipe.job_state_at(drainpipe.pgmq_live_state(c.read_ct, c.message),
                                         c.vt, c.read_ct, coalesce((c.message ->> ''max_attempts'')::integer, 5), $5)
                                WHEN c.message ? ''cancelled'' THEN ''cancelled''
                                WHEN c.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END) AS fits
                       FROM (SELECT u.* FROM (
                               SELECT m.msg_id AS id, m.enqueued_at AS at, true AS live, m.read_ct, m.vt, m.message
                                 FROM pgmq.%1$I m
                               UNION ALL
                               SELECT a.msg_id, a.enqueued_at, false, a.read_ct, a.vt, a.message
                                 FROM pgmq.%2$I a) u
                              WHERE u.id < $6 AND u.id > $7
                              ORDER BY u.id DESC LIMIT $8) c) w',
            'q_' || p_queue, 'a_' || p_queue)
          INTO v_read, v_last, v_newest
          USING p_state, p_tenant, p_before_at, p_before_id, p_now,
                coalesce(low, 9223372036854775807), p_after, v_chunk, v_newest, v_limit;
        IF v_read < v_chunk THEN
            low := NULL;  -- read down to p_after
            EXIT;
        END IF;
        low := v_last;
        IF cardinality(v_newest) >= v_limit THEN
            -- the newest stamp of the lowest 16 ids read (see job_records_newest)
            EXECUTE format('SELECT max(l.at) FROM (
                                SELECT u.at FROM (SELECT msg_id AS id, enqueued_at AS at FROM pgmq.%1$I
                                                  UNION ALL
                                                  SELECT msg_id, enqueued_at FROM pgmq.%2$I) u
                                 WHERE u.id >= $1 ORDER BY u.id LIMIT 16) l',
                           'q_' || p_queue, 'a_' || p_queue)
              INTO v_bound USING v_last;
            EXIT WHEN (v_newest[v_limit]).at >= v_bound + v_window;
            v_chunk := 64 + v_limit / 4;  -- the page is found: only its last window is left
        ELSE
            v_chunk := least(v_chunk * 2, 100000);
        END IF;
    END LOOP;
    ids := ARRAY(SELECT x.id FROM unnest(v_newest) x);
END
$$;

-- 0010's list_jobs_v2 (arguments, rows, order and cursor unchanged), each queue read over
-- the ids its page needs (pgmq_newest_window) and, for jobs stored before 0013, on the
-- partial indexes.
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
SET enable_seqscan = off
-- (the cost of a path turned off is not a reason to compile the query)
SET jit = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_limit integer := greatest(coalesce(p_limit, 100), 1);
    v_queue record;
    v_window record;
    v_parts text[] := '{}';
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    FOR v_queue IN
        SELECT m.queue_name::text AS name, coalesce(b.last_id, 0) AS after,
               coalesce(p_before_id, 0)
                 + CASE WHEN m.queue_name::text < coalesce(p_before_queue, '') THEN 1 ELSE 0 END AS before_id
          FROM pgmq.meta m LEFT JOIN drainpipe.pgmq_list_before b ON b.queue = m.queue_name::text
         WHERE m.queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'
           AND (p_queue IS NULL OR m.queue_name = p_queue)
           AND to_regclass('pgmq.a_' || m.queue_name) IS NOT NULL
    LOOP
        v_window := drainpipe.pgmq_newest_window(v_queue.name, p_state, p_tenant, v_limit, p_before_at,
                                                 v_queue.before_id, v_now, v_queue.after);
        IF cardinality(v_window.ids) > 0 THEN
            -- the page's rows the walk found (each queue's page is these, by id)
            v_parts := v_parts || drainpipe.pgmq_records_ids_sql(v_queue.name, NULL, NULL, v_window.ids);
        END IF;
        IF v_queue.after > 0 THEN
            v_parts := v_parts || drainpipe.pgmq_records_ids_sql(v_queue.name, NULL, v_queue.after);
        END IF;
    END LOOP;
    IF cardinality(v_parts) = 0 THEN
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
    $sql$, array_to_string(v_parts, ' UNION ALL '))
      USING p_state, p_tenant, p_before_at, coalesce(p_before_id, 0), coalesce(p_before_queue, ''),
            v_now, v_limit;
END
$$;
