-- jobs on Supabase Queues / pgmq (backend="pgmq").
-- Each queue is pgmq's pair of tables pgmq.q_<queue> (live) and pgmq.a_<queue> (archive).
-- Only the table layout every pgmq since 1.4 shares is used (msg_id, read_ct, enqueued_at,
-- vt, message; archive adds archived_at) plus pgmq.create(), so the same SQL runs on
-- Supabase's 1.4.4 / 1.5.1 extension and on the SQL-only 1.13 install.
-- read_ct is the attempt number (1 on the first claim) and the fencing token; vt is the lease end.

-- Creates the queue and our two partial indexes when missing; safe to race.
CREATE OR REPLACE FUNCTION drainpipe.ensure_job_queue(p_queue text)
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
    -- dedupe lookups only touch messages that carry a key
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I ((message ->> ''dedupe_key'')) WHERE message ? ''dedupe_key''',
                   'q_' || p_queue || '_dedupe_idx', 'q_' || p_queue);
    -- dead letters newest first without scanning completed jobs
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''dead''',
                   'a_' || p_queue || '_dead_idx', 'a_' || p_queue);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.index_job_queue(p_queue text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.ensure_job_queue(p_queue) $$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job(
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
    v_message jsonb := drainpipe.job_message(p_payload, p_max_attempts, p_dedupe_key);
    v_table text := 'q_' || p_queue;
    v_id bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.' || v_table) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue(p_queue);
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
    EXECUTE format('INSERT INTO pgmq.%I (vt, message) VALUES ($1, $2) RETURNING msg_id', v_table)
      INTO v_id
      USING clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), v_message;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs(
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
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.job_message('{}', p_max_attempts, NULL);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue(p_queue);
    END IF;
    RETURN QUERY EXECUTE format(
        'INSERT INTO pgmq.%I (vt, message)
         SELECT $1, jsonb_build_object(''payload'', e.value, ''max_attempts'', $2)
           FROM jsonb_array_elements($3) WITH ORDINALITY AS e(value, n)
          ORDER BY e.n
         RETURNING msg_id', 'q_' || p_queue)
      USING clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), p_max_attempts, p_payloads;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz, message jsonb)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_row record;
    v_claimed integer;
    v_dead integer;
    v_statement text;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue(p_queue);
    END IF;
    -- One statement picks visible messages; those whose lease ran out on their last attempt
    -- are archived dead (disjoint rows, so both writes fit one statement), the rest leased.
    v_statement := format(
        $q$
        WITH picked AS (
            SELECT msg_id, read_ct >= coalesce((message ->> 'max_attempts')::integer, 5) AS exhausted
              FROM pgmq.%1$I
             WHERE vt <= clock_timestamp()
             ORDER BY msg_id
             LIMIT $1
               FOR UPDATE SKIP LOCKED
        ), dead AS (
            DELETE FROM pgmq.%1$I d USING picked p
             WHERE d.msg_id = p.msg_id AND p.exhausted
            RETURNING d.msg_id, d.read_ct, d.enqueued_at, d.vt, d.message
        ), archived AS (
            INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message)
            SELECT msg_id, read_ct, enqueued_at, vt,
                   message || '{"last_error": "The lease ran out on the last attempt", "dead": true}'::jsonb
              FROM dead
        ), claimed AS (
            UPDATE pgmq.%1$I m
               SET vt = clock_timestamp() + $2, read_ct = m.read_ct + 1
              FROM picked p
             WHERE m.msg_id = p.msg_id AND NOT p.exhausted
            RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
        )
        SELECT msg_id, read_ct, enqueued_at, vt, message, false AS dead FROM claimed
        UNION ALL
        SELECT msg_id, read_ct, enqueued_at, vt, message, true FROM dead
        $q$, 'q_' || p_queue, 'a_' || p_queue);
    -- A batch made only of dead letters says nothing about what is behind it: look again.
    FOR v_round IN 1..10 LOOP
        v_claimed := 0;
        v_dead := 0;
        FOR v_row IN EXECUTE v_statement USING greatest(p_batch, 1), make_interval(secs => greatest(p_lease, 0)) LOOP
            IF v_row.dead THEN
                v_dead := v_dead + 1;
            ELSE
                v_claimed := v_claimed + 1;
                id := v_row.msg_id;
                attempts := v_row.read_ct;
                enqueued_at := v_row.enqueued_at;
                visible_until := v_row.vt;
                message := v_row.message;
                RETURN NEXT;
            END IF;
        END LOOP;
        EXIT WHEN v_claimed > 0 OR v_dead = 0;
    END LOOP;
END
$$;

-- Fenced by read_ct: a worker whose job was claimed again changes nothing.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs(p_queue text, p_ids bigint[], p_attempts integer[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    RETURN QUERY EXECUTE format(
        'WITH done AS (
             DELETE FROM pgmq.%1$I m USING unnest($1::bigint[], $2::integer[]) AS f(id, attempt)
              WHERE m.msg_id = f.id AND m.read_ct = f.attempt
             RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
         )
         INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message)
         SELECT msg_id, read_ct, enqueued_at, vt, message FROM done
         RETURNING msg_id', 'q_' || p_queue, 'a_' || p_queue)
      USING p_ids, p_attempts;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.complete_job(p_queue text, p_id bigint, p_attempt integer)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs(p_queue, ARRAY[p_id], ARRAY[p_attempt]))
$$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table text := 'q_' || p_queue;
    v_message jsonb;
    v_read_ct integer;
    v_error jsonb := jsonb_build_object('last_error', left(coalesce(p_error, 'null'), 4000));
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    EXECUTE format('SELECT read_ct, message FROM pgmq.%I WHERE msg_id = $1 AND read_ct = $2 FOR UPDATE', v_table)
      INTO v_read_ct, v_message USING p_id, p_attempt;
    IF v_read_ct IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_read_ct >= coalesce((v_message ->> 'max_attempts')::integer, 5) THEN
        EXECUTE format(
            'WITH gone AS (DELETE FROM pgmq.%1$I WHERE msg_id = $1 RETURNING msg_id, read_ct, enqueued_at, vt)
             INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message)
             SELECT msg_id, read_ct, enqueued_at, vt, $2 FROM gone', v_table, 'a_' || p_queue)
          USING p_id, v_message || v_error || '{"dead": true}'::jsonb;
        RETURN 'dead';
    END IF;
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2, vt = clock_timestamp() + $3 WHERE msg_id = $1', v_table)
      USING p_id, v_error,
            make_interval(secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_read_ct)), 0));
    RETURN 'queued';
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    RETURN QUERY EXECUTE format(
        'UPDATE pgmq.%I m SET vt = clock_timestamp() + $3
           FROM unnest($1::bigint[], $2::integer[]) AS f(id, attempt)
          WHERE m.msg_id = f.id AND m.read_ct = f.attempt
         RETURNING m.msg_id', 'q_' || p_queue)
      USING p_ids, p_attempts, make_interval(secs => greatest(p_lease, 0));
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease(
    p_queue text, p_id bigint, p_attempt integer, p_lease double precision
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease))
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job(p_queue text, p_id bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_message jsonb;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('DELETE FROM pgmq.%I WHERE msg_id = $1 AND message ? ''dead'' RETURNING message', 'a_' || p_queue)
      INTO v_message USING p_id;
    IF v_message IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN drainpipe.enqueue_job(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats(p_queues text[])
RETURNS TABLE (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
               oldest_age_seconds double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        IF to_regclass('pgmq.q_' || v_queue) IS NULL THEN
            -- a queue nobody used yet
            ready := 0; in_flight := 0; delayed := 0; dead := 0; oldest_age_seconds := NULL;
        ELSE
            EXECUTE format(
                'SELECT count(*) FILTER (WHERE vt <= clock_timestamp() AND NOT exhausted),
                        count(*) FILTER (WHERE vt > clock_timestamp() AND read_ct > 0),
                        count(*) FILTER (WHERE vt > clock_timestamp() AND read_ct = 0),
                        count(*) FILTER (WHERE vt <= clock_timestamp() AND exhausted)
                          + (SELECT count(*) FROM pgmq.%2$I WHERE message ? ''dead''),
                        extract(epoch FROM clock_timestamp()
                                - min(enqueued_at) FILTER (WHERE NOT (vt <= clock_timestamp() AND exhausted)))::double precision
                   FROM (SELECT vt, read_ct, enqueued_at,
                                read_ct >= coalesce((message ->> ''max_attempts'')::integer, 5) AS exhausted
                           FROM pgmq.%1$I) m', 'q_' || v_queue, 'a_' || v_queue)
              INTO ready, in_flight, delayed, dead, oldest_age_seconds;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs(
    p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, died_at timestamptz, message jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT msg_id, read_ct, enqueued_at, archived_at, message FROM pgmq.%I
          WHERE message ? ''dead'' AND ($1 IS NULL OR msg_id < $1)
          ORDER BY msg_id DESC LIMIT $2', 'a_' || p_queue)
      USING p_before_id, least(greatest(coalesce(p_max_rows, 100), 1), 1000);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
RETURNS SETOF bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT msg_id FROM pgmq.%I WHERE message ? ''dead'' AND ($1 IS NULL OR msg_id = ANY ($1))
          ORDER BY msg_id DESC LIMIT $2', 'a_' || p_queue)
      USING p_ids, greatest(coalesce(p_batch, 1000), 1);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive(
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
    v_count integer;
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
             RETURNING 1)
         SELECT count(*)::integer FROM gone', 'a_' || p_queue)
      INTO v_count USING p_dead_older_than, p_older_than, greatest(coalesce(p_batch, 10000), 1);
    RETURN v_count;
END
$$;
