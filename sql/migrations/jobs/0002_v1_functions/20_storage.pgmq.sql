-- jobs v1 on Supabase Queues / pgmq (backend="pgmq"). Same storage as release 0 (0001);
-- the functions gain the _v1 suffix, return the declared row types, and take p_now (the
-- current time; NULL = the server clock) at the end of the transition functions.

-- The hot paths (claim, complete) of each queue are functions of their own with static
-- SQL, so plpgsql plans them once per session. Their release-0 versions took no p_now:
-- these take it as a required third argument (so a two-argument call can only mean the
-- old one), keeping the names and, once created, the oids across installs.
CREATE OR REPLACE FUNCTION drainpipe.define_job_queue_functions_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- the queue's lock (ensure_job_queue_v1's): an install regenerating these functions and
    -- a first use creating them would otherwise both CREATE and one fail on pg_proc's key
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    -- release 0's two-argument versions: their callers (the unversioned claim_jobs and
    -- complete_jobs) now go through the _v1 functions
    EXECUTE format('DROP FUNCTION IF EXISTS drainpipe.%I(double precision, integer)', 'claim_jobs__' || p_queue);
    EXECUTE format('DROP FUNCTION IF EXISTS drainpipe.%I(bigint[], integer[])', 'complete_jobs__' || p_queue);
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(p_lease double precision, p_batch integer, p_now timestamptz)
        RETURNS SETOF drainpipe.job_row_v1
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        -- left to choose, the plan cache plans this anew on every call (the generic plan's
        -- LIMIT $n looks dear); the generic plan walks the same index, as
        -- tests/test_query_plan.py checks. No seqscans: the session keeps this plan, and one
        -- made while the queue was empty must not scan the table once it has grown.
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_claimed bigint;
            v_now timestamptz;
            v_until timestamptz;
            v_batch integer := greatest(p_batch, 1);
        BEGIN
            LOOP
                -- computed once per round: inside the UPDATE it would be computed for every row
                v_now := coalesce(p_now, clock_timestamp());
                v_until := v_now + make_interval(secs => greatest(p_lease, 0));
                RETURN QUERY
                -- oldest visible first; rows another worker is claiming are skipped, not waited for
                WITH picked AS (
                    SELECT q.msg_id, q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                      FROM pgmq.%2$I q
                     -- volatile (clock_timestamp() inside), not v_now: a volatile bound is no index
                     -- condition, so the planner cannot trade the msg_id order for a vt range plus a sort
                     WHERE q.vt <= coalesce(p_now, clock_timestamp())
                     ORDER BY q.msg_id
                     LIMIT v_batch
                       FOR UPDATE SKIP LOCKED
                ), dead AS (
                    -- its lease ran out on the last attempt: a dead letter, not work to run again.
                    -- = ANY(ARRAY(...)) keeps primary-key lookups even under a generic plan.
                    DELETE FROM pgmq.%2$I d
                     WHERE d.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE p.exhausted))
                    RETURNING d.msg_id, d.read_ct, d.enqueued_at, d.vt, d.message
                ), archived AS (
                    INSERT INTO pgmq.%3$I (msg_id, read_ct, enqueued_at, vt, message, archived_at)
                    SELECT x.msg_id, x.read_ct, x.enqueued_at, x.vt,
                           x.message || '{"last_error": "The lease ran out on the last attempt", "dead": true}'::jsonb,
                           coalesce(p_now, now())
                      FROM dead x
                )
                UPDATE pgmq.%2$I m
                   SET vt = v_until,
                       read_ct = m.read_ct + 1
                 WHERE m.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE NOT p.exhausted))
                -- the message's fields as columns: the client then parses only the payload's JSON
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message -> 'payload',
                          coalesce((m.message ->> 'max_attempts')::integer, 5), m.message ->> 'last_error';
                GET DIAGNOSTICS v_claimed = ROW_COUNT;
                EXIT WHEN v_claimed > 0;
                -- nothing claimed: done, unless the batch was all dead letters and more waits
                -- behind (ORDER BY vt keeps this probe on the vt index). SKIP LOCKED: a row
                -- another worker is claiming is no reason to go round again; a row found here
                -- is picked next round (claimed or archived), so every round makes progress
                -- and the loop ends however many dead letters lie ahead.
                PERFORM 1 FROM pgmq.%2$I w WHERE w.vt <= v_now ORDER BY w.vt LIMIT 1
                    FOR UPDATE SKIP LOCKED;
                EXIT WHEN NOT FOUND;
            END LOOP;
        END
        $body$
        $fn$, 'claim_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(p_ids bigint[], p_attempts integer[], p_now timestamptz)
        RETURNS SETOF bigint
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        BEGIN
            RETURN QUERY
            -- fenced by read_ct: a worker whose job was claimed again changes nothing
            WITH done AS (
                -- a join on (id, attempt): one primary-key lookup per pair
                DELETE FROM pgmq.%2$I m
                 USING unnest(p_ids, p_attempts) AS f(id, attempt)
                 WHERE m.msg_id = f.id AND m.read_ct = f.attempt
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
            )
            INSERT INTO pgmq.%3$I (msg_id, read_ct, enqueued_at, vt, message, archived_at)
            SELECT d.msg_id, d.read_ct, d.enqueued_at, d.vt, d.message, coalesce(p_now, now()) FROM done d
            RETURNING msg_id;
        END
        $body$
        $fn$, 'complete_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue);
    -- generated functions follow the module's privileges: the service role only
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'claim_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], timestamptz) FROM PUBLIC', 'complete_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'claim_jobs__' || p_queue);
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], timestamptz) TO service_role', 'complete_jobs__' || p_queue);
    END IF;
END
$define$;

-- Creates the queue, our two partial indexes and its functions when missing; safe to race.
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
    -- dedupe lookups only touch messages that carry a key
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I ((message ->> ''dedupe_key'')) WHERE message ? ''dedupe_key''',
                   'q_' || p_queue || '_dedupe_idx', 'q_' || p_queue);
    -- dead letters newest first without scanning completed jobs
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''dead''',
                   'a_' || p_queue || '_dead_idx', 'a_' || p_queue);
    IF to_regprocedure('drainpipe.claim_jobs__' || p_queue || '(double precision, integer, timestamptz)') IS NULL
       OR to_regprocedure('drainpipe.complete_jobs__' || p_queue || '(bigint[], integer[], timestamptz)') IS NULL THEN
        PERFORM drainpipe.define_job_queue_functions_v1(p_queue);
    END IF;
END
$$;

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
    EXECUTE format('INSERT INTO pgmq.%I (vt, message) VALUES ($1, $2) RETURNING msg_id', v_table)
      INTO v_id
      USING clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), v_message;
    RETURN v_id;
END
$$;

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
        'INSERT INTO pgmq.%I (vt, message)
         SELECT $1, jsonb_build_object(''payload'', e.value, ''max_attempts'', $2)
           FROM jsonb_array_elements($3) WITH ORDINALITY AS e(value, n)
          ORDER BY e.n
         RETURNING msg_id', 'q_' || p_queue)
      USING clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), p_max_attempts, p_payloads;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_row_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    -- by name only, as release 0 did (parsing a signature costs more per call); a name made
    -- ambiguous by a leftover release-0 function finds NULL and lets ensure_job_queue_v1
    -- check the exact signature
    IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    -- the queue's own function (see define_job_queue_functions_v1): its plan is cached
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'claim_jobs__' || p_queue)
      USING p_lease, p_batch, p_now;
END
$$;

-- Fenced by read_ct: a worker whose job was claimed again changes nothing.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF to_regproc('drainpipe.complete_jobs__' || p_queue) IS NULL THEN
        IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
            RETURN;  -- no such queue: nothing to complete
        END IF;
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'complete_jobs__' || p_queue)
      USING p_ids, p_attempts, p_now;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.complete_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_now))
$$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v1(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
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
             INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message, archived_at)
             SELECT msg_id, read_ct, enqueued_at, vt, $2, $3 FROM gone', v_table, 'a_' || p_queue)
          USING p_id, v_message || v_error || '{"dead": true}'::jsonb, coalesce(p_now, now());
        RETURN 'dead';
    END IF;
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2, vt = $4 + $3 WHERE msg_id = $1', v_table)
      USING p_id, v_error,
            make_interval(secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_read_ct)), 0)),
            coalesce(p_now, clock_timestamp());
    RETURN 'queued';
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    RETURN QUERY EXECUTE format(
        'UPDATE pgmq.%I m SET vt = $4 + $3
           FROM unnest($1::bigint[], $2::integer[]) AS f(id, attempt)
          WHERE m.msg_id = f.id AND m.read_ct = f.attempt
         RETURNING m.msg_id', 'q_' || p_queue)
      USING p_ids, p_attempts, make_interval(secs => greatest(p_lease, 0)), coalesce(p_now, clock_timestamp());
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease_v1(
    p_queue text, p_id bigint, p_attempt integer, p_lease double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease, p_now))
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v1(p_queue text, p_id bigint)
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
    RETURN drainpipe.enqueue_job_v1(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v1(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
    v_row drainpipe.job_queue_stats_v1;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        v_row.queue := v_queue;
        IF to_regclass('pgmq.q_' || v_queue) IS NULL THEN
            -- a queue nobody used yet
            v_row.ready := 0; v_row.in_flight := 0; v_row.delayed := 0; v_row.dead := 0;
            v_row.oldest_age_seconds := NULL;
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
              INTO v_row.ready, v_row.in_flight, v_row.delayed, v_row.dead, v_row.oldest_age_seconds;
        END IF;
        RETURN NEXT v_row;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(
    p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL
)
RETURNS SETOF drainpipe.dead_job_v1
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

-- Release 0's unversioned entry points that reached the per-queue functions now go
-- through the _v1 ones (same signatures, so CREATE OR REPLACE keeps them callable by the
-- previous release's code during a rolling deploy); 0003 drops them.
CREATE OR REPLACE FUNCTION drainpipe.define_job_queue_functions(p_queue text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.define_job_queue_functions_v1(p_queue) $$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_job_queue(p_queue text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.ensure_job_queue_v1(p_queue) $$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs(
    p_queue text,
    p_lease double precision DEFAULT 300,
    p_batch integer DEFAULT 1
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
               payload jsonb, max_attempts integer, last_error text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM drainpipe.claim_jobs_v1(p_queue, p_lease, p_batch);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.complete_jobs(p_queue text, p_ids bigint[], p_attempts integer[])
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.complete_jobs_v1(p_queue, p_ids, p_attempts) $$;

-- The per-queue functions of existing queues in their v1 form (release 0's are dropped).
DO $regenerate$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        PERFORM drainpipe.define_job_queue_functions_v1(v_queue);
    END LOOP;
END
$regenerate$;
