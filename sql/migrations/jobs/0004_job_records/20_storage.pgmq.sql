-- jobs 0004 on pgmq: records. A live job is its row in pgmq.q_<queue>, a finished one its
-- row in pgmq.a_<queue> (the archive row is the terminal record); what pgmq's tables cannot
-- hold lives in drainpipe.job_attempts (attempts that ended other than in success) and in
-- keys of the message document that the settling statement writes anyway:
--   failed: the attempt that failed (the job waits out its backoff: retry_wait)
--   last_code: the code of the last failed attempt, or why a dead/cancelled job ended
--   skipped: the code of a success that skipped its work (Skip)
--   cancelled / dead: how an archived job ended (neither: it succeeded)
--   parent_id / replayed_by: replay lineage
-- started_at is pgmq's last_read_at (pgmq 1.5+; NULL on older pgmq, which lacks the column).
-- No pgmq.delete/archive/set_vt: every settlement is one of our fenced statements.

-- pgmq.q_<queue> has last_read_at (pgmq 1.5+)?
CREATE OR REPLACE FUNCTION drainpipe.pgmq_has_last_read(p_queue text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = to_regclass('pgmq.q_' || p_queue)
                      AND attname = 'last_read_at' AND NOT attisdropped)
$$;

-- The stored state of a live message: queued (never claimed), retry_wait (its current
-- attempt failed), else leased (job_state_at reads a lapsed lease as retry_wait or dead).
CREATE OR REPLACE FUNCTION drainpipe.pgmq_live_state(p_read_ct integer, p_message jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_read_ct = 0 THEN 'queued'
                WHEN p_message ->> 'failed' = p_read_ct::text THEN 'retry_wait'
                ELSE 'leased' END
$$;

CREATE OR REPLACE FUNCTION drainpipe.define_job_queue_functions_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
DECLARE
    -- pgmq 1.5+: the claim stamps last_read_at (the attempt's start) and the archive keeps it
    v_read_set text := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at = v_now' ELSE '' END;
    v_read_col text := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'q.last_read_at' ELSE 'NULL::timestamptz' END;
    v_archive_cols text := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at' ELSE '' END;
    v_archive_vals text := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', d.last_read_at' ELSE '' END;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    EXECUTE format('DROP FUNCTION IF EXISTS drainpipe.%I(double precision, integer)', 'claim_jobs__' || p_queue);
    EXECUTE format('DROP FUNCTION IF EXISTS drainpipe.%I(bigint[], integer[])', 'complete_jobs__' || p_queue);
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(p_lease double precision, p_batch integer, p_now timestamptz)
        RETURNS SETOF drainpipe.job_row_v1
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        -- generic plan, no seqscans: see 0002
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
                v_now := coalesce(p_now, clock_timestamp());
                v_until := v_now + make_interval(secs => greatest(p_lease, 0));
                RETURN QUERY
                WITH picked AS (
                    SELECT q.msg_id, q.read_ct, q.vt, %4$s AS started_at,
                           q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted,
                           -- a claimed attempt that did not fail: its lease ran out
                           q.read_ct > 0 AND q.message ->> 'failed' IS DISTINCT FROM q.read_ct::text AS lapsed
                      FROM pgmq.%2$I q
                     WHERE q.vt <= coalesce(p_now, clock_timestamp())
                     ORDER BY q.msg_id
                     LIMIT v_batch
                       FOR UPDATE SKIP LOCKED
                ), expired AS (
                    INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
                    SELECT %6$L, p.msg_id, p.read_ct, p.started_at, p.vt, 'expired', 'LEASE_EXPIRED'
                      FROM picked p WHERE p.lapsed
                    ON CONFLICT DO NOTHING
                ), dead AS (
                    DELETE FROM pgmq.%2$I d
                     WHERE d.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE p.exhausted))
                    RETURNING d.*
                ), archived AS (
                    INSERT INTO pgmq.%3$I (msg_id, read_ct, enqueued_at, vt, message, archived_at%7$s)
                    SELECT d.msg_id, d.read_ct, d.enqueued_at, d.vt,
                           d.message || '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}'::jsonb,
                           d.vt%8$s
                      FROM dead d
                )
                UPDATE pgmq.%2$I m
                   SET vt = v_until,
                       read_ct = m.read_ct + 1%5$s
                 WHERE m.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE NOT p.exhausted))
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message -> 'payload',
                          coalesce((m.message ->> 'max_attempts')::integer, 5), m.message ->> 'last_error';
                GET DIAGNOSTICS v_claimed = ROW_COUNT;
                EXIT WHEN v_claimed > 0;
                PERFORM 1 FROM pgmq.%2$I w WHERE w.vt <= v_now ORDER BY w.vt LIMIT 1
                    FOR UPDATE SKIP LOCKED;
                EXIT WHEN NOT FOUND;
            END LOOP;
        END
        $body$
        $fn$, 'claim_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue, v_read_col, v_read_set,
              p_queue, v_archive_cols, v_archive_vals);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(p_ids bigint[], p_attempts integer[], p_now timestamptz)
        RETURNS SETOF bigint
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_done integer;
        BEGIN
            RETURN QUERY
            -- fenced by read_ct, and only while the attempt holds its lease (not failed)
            WITH done AS (
                DELETE FROM pgmq.%2$I m
                 USING unnest(p_ids, p_attempts) AS f(id, attempt)
                 WHERE m.msg_id = f.id AND m.read_ct = f.attempt
                   AND m.message ->> 'failed' IS DISTINCT FROM m.read_ct::text
                RETURNING m.*
            )
            INSERT INTO pgmq.%3$I (msg_id, read_ct, enqueued_at, vt, message, archived_at%5$s)
            -- the document as it is (no copy per job): a reader takes a success's code
            -- from "skipped" only, so an earlier attempt's last_code does not show
            SELECT d.msg_id, d.read_ct, d.enqueued_at, d.vt, d.message,
                   coalesce(p_now, clock_timestamp())%6$s
              FROM done d
            RETURNING msg_id;
            GET DIAGNOSTICS v_done = ROW_COUNT;
            IF v_done < cardinality(p_ids) THEN
                -- a holder whose attempt was cancelled: what it reported is kept, nothing else
                UPDATE drainpipe.job_attempts a
                   SET late_outcome = 'succeeded'
                  FROM unnest(p_ids, p_attempts) AS f(id, attempt)
                 WHERE a.queue = %4$L AND a.job_id = f.id AND a.number = f.attempt
                   AND a.outcome = 'cancelled' AND a.late_outcome IS NULL;
            END IF;
        END
        $body$
        $fn$, 'complete_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue, p_queue,
              v_archive_cols, v_archive_vals);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'claim_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], timestamptz) FROM PUBLIC', 'complete_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'claim_jobs__' || p_queue);
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], timestamptz) TO service_role', 'complete_jobs__' || p_queue);
    END IF;
END
$define$;

-- Creates the queue, our partial indexes and its functions when missing; safe to race.
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
    IF to_regprocedure('drainpipe.claim_jobs__' || p_queue || '(double precision, integer, timestamptz)') IS NULL
       OR to_regprocedure('drainpipe.complete_jobs__' || p_queue || '(bigint[], integer[], timestamptz)') IS NULL THEN
        PERFORM drainpipe.define_job_queue_functions_v1(p_queue);
    END IF;
END
$$;

-- -- settlements outside the hot path (one message, dynamic SQL per queue) -----------------

-- A failed attempt with its code (see the table backend's fail_job_v2).
CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(
    p_queue text,
    p_id bigint,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL,
    p_code text DEFAULT NULL,
    p_discard boolean DEFAULT false,
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
    v_started timestamptz;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_code text := CASE WHEN drainpipe.is_job_code(p_code) THEN p_code ELSE 'HANDLER_ERROR' END;
    v_discard boolean := coalesce(p_discard, false);
    v_error text := left(coalesce(p_error, 'null'), 4000);
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.' || v_table) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT read_ct, message, %s FROM pgmq.%I WHERE msg_id = $1 AND read_ct = $2 FOR UPDATE',
                   CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'last_read_at' ELSE 'NULL::timestamptz' END, v_table)
      INTO v_read_ct, v_message, v_started USING p_id, p_attempt;
    IF v_read_ct IS NULL OR v_message ->> 'failed' = v_read_ct::text THEN
        -- not held; a holder whose attempt was cancelled gets its word kept
        UPDATE drainpipe.job_attempts SET late_outcome = 'failed'
         WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
           AND outcome = 'cancelled' AND late_outcome IS NULL;
        RETURN NULL;
    END IF;
    INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
    VALUES (p_queue, p_id, p_attempt, v_started, v_now,
            CASE WHEN v_discard THEN 'discarded' ELSE 'failed' END, v_code)
    ON CONFLICT DO NOTHING;
    IF v_discard OR v_read_ct >= coalesce((v_message ->> 'max_attempts')::integer, 5) THEN
        PERFORM drainpipe.pgmq_archive_job(p_queue, p_id, jsonb_build_object(
            'last_error', v_error, 'dead', true,
            'last_code', CASE WHEN v_discard THEN v_code ELSE 'MAX_ATTEMPTS' END), v_now);
        RETURN 'dead';
    END IF;
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2, vt = $4 + $3 WHERE msg_id = $1', v_table)
      USING p_id,
            jsonb_build_object('last_error', v_error, 'failed', v_read_ct, 'last_code', v_code),
            make_interval(secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_read_ct)), 0)),
            v_now;
    RETURN 'queued';
END
$$;

-- Moves a live message to the archive with p_marks merged into its document.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_archive_job(p_queue text, p_id bigint, p_marks jsonb, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_with_read boolean := drainpipe.pgmq_has_last_read(p_queue);
    v_moved integer;
BEGIN
    EXECUTE format(
        'WITH gone AS (DELETE FROM pgmq.%1$I WHERE msg_id = $1 RETURNING *)
         INSERT INTO pgmq.%2$I (msg_id, read_ct, enqueued_at, vt, message, archived_at%3$s)
         SELECT msg_id, read_ct, enqueued_at, vt, (message - ''failed'') || $2, $3%3$s FROM gone',
        'q_' || p_queue, 'a_' || p_queue, CASE WHEN v_with_read THEN ', last_read_at' ELSE '' END)
      USING p_id, p_marks, p_at;
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    RETURN v_moved > 0;
END
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
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, p_retry_in, 'HANDLER_ERROR', false, p_now) $$;

CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_held boolean;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF NOT drainpipe.is_job_code(p_code) THEN
        PERFORM drainpipe.assert_job_code(p_code);
    END IF;
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('SELECT true FROM pgmq.%I WHERE msg_id = $1 AND read_ct = $2
                      AND message ->> ''failed'' IS DISTINCT FROM read_ct::text FOR UPDATE', 'q_' || p_queue)
      INTO v_held USING p_id, p_attempt;
    IF v_held THEN
        RETURN drainpipe.pgmq_archive_job(p_queue, p_id, jsonb_build_object('skipped', p_code),
                                          coalesce(p_now, clock_timestamp()));
    END IF;
    UPDATE drainpipe.job_attempts SET late_outcome = 'succeeded'
     WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
       AND outcome = 'cancelled' AND late_outcome IS NULL;
    RETURN false;
END
$$;

-- The heartbeat: only a live lease (an attempt that has not failed) is extended.
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
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'UPDATE pgmq.%I m SET vt = $4 + $3
           FROM unnest($1::bigint[], $2::integer[]) AS f(id, attempt)
          WHERE m.msg_id = f.id AND m.read_ct = f.attempt
            AND m.message ->> ''failed'' IS DISTINCT FROM m.read_ct::text
         RETURNING m.msg_id', 'q_' || p_queue)
      USING p_ids, p_attempts, make_interval(secs => greatest(p_lease, 0)), coalesce(p_now, clock_timestamp());
END
$$;

-- -- cancel and replay --------------------------------------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_read_ct integer;
    v_message jsonb;
    v_vt timestamptz;
    v_started timestamptz;
    v_state text;
    v_found boolean;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT read_ct, message, vt, %s FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE',
                   CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'last_read_at' ELSE 'NULL::timestamptz' END,
                   'q_' || p_queue)
      INTO v_read_ct, v_message, v_vt, v_started USING p_id;
    IF v_read_ct IS NULL THEN
        EXECUTE format('SELECT true FROM pgmq.%I WHERE msg_id = $1', 'a_' || p_queue) INTO v_found USING p_id;
        RETURN CASE WHEN v_found THEN 'terminal' END;
    END IF;
    v_state := drainpipe.pgmq_live_state(v_read_ct, v_message);
    IF v_state = 'leased' AND v_vt <= v_now THEN
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_read_ct, v_started, v_vt, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        IF v_read_ct >= coalesce((v_message ->> 'max_attempts')::integer, 5) THEN
            PERFORM drainpipe.pgmq_archive_job(p_queue, p_id,
                '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}', v_vt);
            RETURN 'terminal';
        END IF;
    ELSIF v_state = 'leased' THEN
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_read_ct, v_started, v_now, 'cancelled', 'CANCELLED')
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM drainpipe.pgmq_archive_job(p_queue, p_id, '{"cancelled": true, "last_code": "CANCELLED"}', v_now);
    RETURN 'cancelled';
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v2(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_message jsonb;
    v_read_ct integer;
    v_vt timestamptz;
    v_new bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    -- a last lease that ran out is a dead job already, not swept yet: sweep it now
    EXECUTE format('SELECT read_ct, message, vt FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE', 'q_' || p_queue)
      INTO v_read_ct, v_message, v_vt USING p_id;
    IF v_read_ct IS NOT NULL THEN
        IF drainpipe.job_state_at(drainpipe.pgmq_live_state(v_read_ct, v_message), v_vt, v_read_ct,
                                  coalesce((v_message ->> 'max_attempts')::integer, 5), v_now) <> 'dead' THEN
            RETURN NULL;
        END IF;
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_read_ct, NULL, v_vt, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        PERFORM drainpipe.pgmq_archive_job(p_queue, p_id,
            '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}', v_vt);
    END IF;
    EXECUTE format('SELECT message FROM pgmq.%I WHERE msg_id = $1 AND message ? ''dead''
                      AND NOT message ? ''replayed_by'' FOR UPDATE', 'a_' || p_queue)
      INTO v_message USING p_id;
    IF v_message IS NULL THEN
        RETURN NULL;
    END IF;
    v_new := drainpipe.enqueue_job_v1(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1 AND NOT message ? ''parent_id''',
                   'q_' || p_queue)
      USING v_new, jsonb_build_object('parent_id', p_id);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1', 'a_' || p_queue)
      USING p_id, jsonb_build_object('replayed_by', v_new);
    RETURN v_new;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v1(p_queue text, p_id bigint)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT drainpipe.replay_dead_job_v2(p_queue, p_id, NULL) $$;

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
        'SELECT msg_id FROM pgmq.%I WHERE message ? ''dead'' AND NOT message ? ''replayed_by''
            AND ($1 IS NULL OR msg_id = ANY ($1))
          ORDER BY msg_id DESC LIMIT $2', 'a_' || p_queue)
      USING p_ids, greatest(coalesce(p_batch, 1000), 1);
END
$$;

-- -- records ------------------------------------------------------------------------------

-- One queue's records as SQL text (the live and the archived rows, newest first), with the
-- parameters $1 state, $2 tenant, $3 before id, $4 before queue, $5 now, $6 limit, $7 id.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_records_sql(p_queue text)
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
             WHERE ($7::bigint IS NULL OR m.msg_id = $7)
               AND ($3::bigint IS NULL OR m.msg_id < $3 + CASE WHEN %1$L < $4 THEN 1 ELSE 0 END)
               AND ($2::text IS NULL OR drainpipe.job_tenant(m.message -> 'payload') = $2)
             ORDER BY m.msg_id DESC) l
          WHERE $1::text IS NULL
             OR drainpipe.job_state_at(l.stored_state, l.lease_end, l.attempts, l.max_attempts, $5) = $1
          LIMIT $6)
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
             WHERE ($7::bigint IS NULL OR a.msg_id = $7)
               AND ($3::bigint IS NULL OR a.msg_id < $3 + CASE WHEN %1$L < $4 THEN 1 ELSE 0 END)
               AND ($2::text IS NULL OR drainpipe.job_tenant(a.message -> 'payload') = $2)
               AND ($1::text IS NULL OR $1 = CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                                                  WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END)
             ORDER BY a.msg_id DESC) t
          LIMIT $6)
    $sql$, p_queue, 'q_' || p_queue, 'a_' || p_queue,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'm.last_read_at' ELSE 'NULL::timestamptz' END,
       CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'a.last_read_at' ELSE 'NULL::timestamptz' END)
$$;

-- Records of one queue (p_queue) or of every queue (NULL), newest first by (id, queue).
CREATE OR REPLACE FUNCTION drainpipe.pgmq_records(
    p_queue text, p_state text, p_tenant text, p_limit integer, p_before_id bigint,
    p_before_queue text, p_id bigint, p_now timestamptz, p_history boolean
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_parts text;
BEGIN
    SELECT string_agg(drainpipe.pgmq_records_sql(m.queue_name), ' UNION ALL ')
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
               r.parent_id, r.replayed_by,
               CASE WHEN $8 THEN drainpipe.job_history_v1(r.queue, r.id, r.attempts, r.stored_state,
                   r.started_at, r.finished_at, r.lease_end, r.last_code, $5) END
          FROM (SELECT u.*, drainpipe.job_state_at(u.stored_state, u.lease_end, u.attempts,
                                                   u.max_attempts, $5) AS read_state
                  FROM (%s) u) r
         ORDER BY r.id DESC, r.queue DESC
         LIMIT $6
    $sql$, v_parts)
      USING p_state, p_tenant, p_before_id, coalesce(p_before_queue, ''), p_now,
            greatest(coalesce(p_limit, 100), 1), p_id, p_history;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.get_job_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    RETURN QUERY SELECT * FROM drainpipe.pgmq_records(p_queue, NULL, NULL, 1, NULL, NULL, p_id,
                                                      coalesce(p_now, clock_timestamp()), true);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v1(
    p_queue text DEFAULT NULL,
    p_state text DEFAULT NULL,
    p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_before_id bigint DEFAULT NULL,
    p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY SELECT * FROM drainpipe.pgmq_records(p_queue, p_state, p_tenant, p_limit, p_before_id,
                                                      p_before_queue, NULL, coalesce(p_now, clock_timestamp()), false);
END
$$;

-- -- stats, dead letters, purge -----------------------------------------------------------

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v2
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue text;
    v_row drainpipe.job_queue_stats_v2;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        v_row.queue := v_queue;
        IF to_regclass('pgmq.q_' || v_queue) IS NULL THEN
            v_row.ready := 0; v_row.in_flight := 0; v_row.delayed := 0; v_row.dead := 0;
            v_row.succeeded := 0; v_row.cancelled := 0; v_row.oldest_age_seconds := NULL;
        ELSE
            EXECUTE format(
                'SELECT count(*) FILTER (WHERE vt <= clock_timestamp() AND NOT exhausted),
                        count(*) FILTER (WHERE vt > clock_timestamp() AND read_ct > 0),
                        count(*) FILTER (WHERE vt > clock_timestamp() AND read_ct = 0),
                        count(*) FILTER (WHERE vt <= clock_timestamp() AND exhausted)
                          + (SELECT count(*) FROM pgmq.%2$I WHERE message ? ''dead'' AND NOT message ? ''replayed_by''),
                        extract(epoch FROM clock_timestamp()
                                - min(enqueued_at) FILTER (WHERE NOT (vt <= clock_timestamp() AND exhausted)))::double precision
                   FROM (SELECT vt, read_ct, enqueued_at,
                                read_ct >= coalesce((message ->> ''max_attempts'')::integer, 5) AS exhausted
                           FROM pgmq.%1$I) m', 'q_' || v_queue, 'a_' || v_queue)
              INTO v_row.ready, v_row.in_flight, v_row.delayed, v_row.dead, v_row.oldest_age_seconds;
            EXECUTE format(
                'SELECT count(*) FILTER (WHERE NOT message ? ''dead'' AND NOT message ? ''cancelled''),
                        count(*) FILTER (WHERE message ? ''cancelled'')
                   FROM pgmq.%I', 'a_' || v_queue)
              INTO v_row.succeeded, v_row.cancelled;
        END IF;
        RETURN NEXT v_row;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v1(p_queues text[])
RETURNS SETOF drainpipe.job_queue_stats_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.oldest_age_seconds
      FROM drainpipe.job_queue_stats_v2(p_queues) s
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
          WHERE message ? ''dead'' AND NOT message ? ''replayed_by'' AND ($1 IS NULL OR msg_id < $1)
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
             RETURNING a.msg_id),
         attempts_gone AS (
             DELETE FROM drainpipe.job_attempts t USING gone g WHERE t.queue = $4 AND t.job_id = g.msg_id)
         SELECT count(*)::integer FROM gone', 'a_' || p_queue)
      INTO v_count USING p_dead_older_than, p_older_than, greatest(coalesce(p_batch, 10000), 1), p_queue;
    RETURN v_count;
END
$$;

-- Existing queues: the new per-queue functions and indexes.
DO $regenerate$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regclass('pgmq.q_' || v_queue) IS NOT NULL AND to_regclass('pgmq.a_' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.define_job_queue_functions_v1(v_queue);
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (msg_id) WHERE message ? ''dead'' AND NOT message ? ''replayed_by''',
                           'a_' || v_queue || '_unreplayed_idx', 'a_' || v_queue);
            EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'a_' || v_queue || '_dead_idx');
        END IF;
    END LOOP;
END
$regenerate$;
