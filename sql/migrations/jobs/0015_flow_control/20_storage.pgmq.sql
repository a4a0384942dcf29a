-- pgmq: flow control (10_flow.sql). A limited queue gets two more functions of its own,
-- defined when its limits are stored (ensure_flow_indexes): flow_pick_jobs__q, the pick
-- its limits allow (a filter over the candidates the unlimited claim would read, as on the
-- table), and flow_claim_jobs__q, jobs 0006's claim with that pick in place of its own.
-- claim_jobs_v1 and each queue's turn function call flow_claim_jobs__q while the queue has
-- a queue_flow row; every other queue runs jobs 0006's claim_jobs__q as before, after one
-- more primary-key probe. define_job_queue_functions_v1 (the unlimited claim) is unchanged.

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
DECLARE
    v_read_col text;
    v_read_set text;
    v_archive_cols text;
    v_archive_vals text;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    v_read_set := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at = v_now' ELSE '' END;
    v_read_col := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'q.last_read_at' ELSE 'NULL::timestamptz' END;
    v_archive_cols := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at' ELSE '' END;
    v_archive_vals := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', d.last_read_at' ELSE '' END;

    -- what is leased (claimed, not failed; a lapsed lease reads vt <= now), per key:
    -- concurrency and key_concurrency count here, bounded by the limits
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                      (drainpipe.job_key(message -> ''payload''), vt)
                    WHERE read_ct > 0 AND (message ->> ''failed'') IS DISTINCT FROM (read_ct::text)',
                   'q_' || p_queue || '_dp_flow_leased', 'q_' || p_queue);
    -- a key's jobs in enqueue order (every row of the queue table is live): ordered=True
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                      (drainpipe.job_key(message -> ''payload''), msg_id)
                    WHERE drainpipe.job_key(message -> ''payload'') IS NOT NULL',
                   'q_' || p_queue || '_dp_flow_order', 'q_' || p_queue);

    -- The pick: the table's job_messages_flow_pick over this queue's table (see there).
    -- Candidates come in vt order, as the unlimited claim reads them; a chunk starts at the
    -- last one's vt, leaving out the rows of that vt already seen (pgmq stamps a batch
    -- with one vt). A job whose last lease ran out is let through without counting: the
    -- claim archives it dead instead of leasing it.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
        )
        RETURNS bigint[]
        -- runs under the settings of its only caller, the flow claim below (a SET clause
        -- costs every call a save and restore)
        LANGUAGE plpgsql
        AS $body$
        DECLARE
            v_room integer;
            v_ids bigint[] := '{}';
            v_keys text[] := '{}';
            v_chunk integer;
            v_scanned integer := 0;
            v_bound integer := p_batch * 50 + 500;
            v_after timestamptz := '-infinity';
            v_tied bigint[] := '{}';
            v_last timestamptz;
            v_rows integer;
            v_take bigint[];
            v_take_keys text[];
            v_gone bigint[];
            v_last_ids bigint[];
        BEGIN
            PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
            v_room := drainpipe.flow_room(p_flow, p_batch,
                CASE WHEN p_flow.concurrency IS NULL THEN 0 ELSE (
                    SELECT count(*) FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > p_now) END,
                p_now);
            v_chunk := 2 * v_room + 8;
            WHILE v_room > 0 AND v_scanned < v_bound LOOP
                WITH chunk AS (
                    SELECT q.msg_id AS id, q.vt, drainpipe.job_key(q.message -> 'payload') AS k,
                           q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                      FROM pgmq.%2$I q
                     WHERE q.vt <= p_now AND q.vt >= v_after AND NOT (q.msg_id = ANY (v_tied))
                     ORDER BY q.vt
                     LIMIT v_chunk
                ), ranked AS (
                    SELECT c.*, row_number() OVER (PARTITION BY c.k ORDER BY c.vt, c.id) AS nth,
                           (SELECT count(*) FROM unnest(v_keys) p WHERE p = c.k) AS picked
                      FROM chunk c WHERE NOT c.exhausted
                ), keyed AS (
                    SELECT d.k,
                           CASE WHEN p_flow.key_concurrency IS NULL THEN 0 ELSE (
                               SELECT count(*) FROM pgmq.%2$I l
                                WHERE drainpipe.job_key(l.message -> 'payload') = d.k
                                  AND l.read_ct > 0
                                  AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                                  AND l.vt > p_now) END AS leased,
                           CASE WHEN p_flow.key_rate_count IS NULL THEN 0 ELSE (
                               SELECT count(*) FROM drainpipe.flow_claims f
                                WHERE f.queue = %3$L AND f.key = d.k
                                  AND f.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)) END AS claimed
                      FROM (SELECT DISTINCT c.k FROM chunk c WHERE c.k IS NOT NULL AND NOT c.exhausted) d
                ), allowed AS (
                    SELECT r.id, r.k, r.vt
                      FROM ranked r LEFT JOIN keyed k ON k.k = r.k
                     WHERE r.k IS NULL
                        OR ((p_flow.key_concurrency IS NULL
                             OR k.leased + r.picked + r.nth <= p_flow.key_concurrency)
                            AND (p_flow.key_rate_count IS NULL
                                 OR k.claimed + r.picked + r.nth <= p_flow.key_rate_count)
                            AND (NOT p_flow.ordered
                                 OR (r.picked = 0 AND NOT EXISTS (
                                        SELECT 1 FROM pgmq.%2$I e
                                         WHERE drainpipe.job_key(e.message -> 'payload') = r.k
                                           AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL
                                           AND e.msg_id < r.id))))
                     ORDER BY r.vt, r.id
                     LIMIT v_room
                )
                SELECT array_agg(a.id ORDER BY a.vt, a.id), array_agg(a.k ORDER BY a.vt, a.id),
                       (SELECT count(*) FROM chunk),
                       (SELECT max(c.vt) FROM chunk c),
                       -- the exhausted ones ride along (archived, not leased, by the claim)
                       ARRAY(SELECT c.id FROM chunk c WHERE c.exhausted),
                       ARRAY(SELECT c.id FROM chunk c WHERE c.vt = (SELECT max(x.vt) FROM chunk x))
                  INTO v_take, v_take_keys, v_rows, v_last, v_gone, v_last_ids
                  FROM allowed a;
                IF v_take IS NOT NULL THEN
                    v_ids := v_ids || v_take;
                    v_keys := v_keys || v_take_keys;
                    v_room := v_room - cardinality(v_take);
                END IF;
                v_ids := v_ids || v_gone;
                v_scanned := v_scanned + v_rows;
                EXIT WHEN v_rows < v_chunk;
                -- the rows of the last vt seen so far: the next chunk starts at that vt
                v_tied := CASE WHEN v_last = v_after THEN v_tied ELSE '{}' END || v_last_ids;
                v_after := v_last;
                v_chunk := least(v_chunk * 4, v_bound);
            END LOOP;
            RETURN v_ids;
        END
        $body$
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue);

    -- The claim: jobs 0006's statement with the pick above. Rows are locked here (the flow
    -- lock keeps other limited claims of the queue out; a cancel or a completion may hold
    -- one: it is skipped and read as it is once locked).
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(p_lease double precision, p_batch integer, p_now timestamptz)
        RETURNS SETOF drainpipe.job_row_v1
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_now timestamptz := coalesce(p_now, clock_timestamp());
            v_until timestamptz := v_now + make_interval(secs => greatest(p_lease, 0));
            v_flow drainpipe.queue_flow;
            v_ids bigint[];
            v_keys text[];
            v_room integer;
            v_rows drainpipe.job_row_v1[];
            v_leased bigint := 0;
            v_beside integer;
        BEGIN
            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %6$L;
            IF v_flow.queue IS NULL THEN
                -- the limits were dropped since the caller looked
                RETURN QUERY SELECT * FROM drainpipe.%9$I(p_lease, p_batch, p_now);
                RETURN;
            END IF;
            IF v_flow.key_concurrency IS NULL AND v_flow.key_rate_count IS NULL AND NOT v_flow.ordered THEN
                -- queue-wide limits only: the unlimited claim, no larger than the room left
                IF v_flow.concurrency IS NOT NULL THEN
                    SELECT count(*) INTO v_leased FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > v_now;
                END IF;
                v_beside := drainpipe.flow_gate(v_flow, greatest(p_batch, 1), v_leased);
                IF v_flow.concurrency IS NOT NULL THEN
                    -- again, under the lock: what committed while this claim waited counts
                    SELECT count(*) INTO v_leased FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > v_now;
                END IF;
                v_room := drainpipe.flow_room(v_flow, greatest(p_batch, 1), v_leased + v_beside, v_now);
                IF v_room = 0 THEN
                    RETURN;
                END IF;
                IF v_flow.rate_count IS NULL THEN
                    RETURN QUERY SELECT * FROM drainpipe.%9$I(p_lease, v_room, v_now);
                    RETURN;
                END IF;
                v_rows := ARRAY(SELECT c FROM drainpipe.%9$I(p_lease, v_room, v_now) c);
                PERFORM drainpipe.flow_record_claims(v_flow,
                    ARRAY(SELECT drainpipe.job_key((r).payload) FROM unnest(v_rows) r), v_now);
                RETURN QUERY SELECT (r).* FROM unnest(v_rows) r;
                RETURN;
            END IF;
            v_ids := drainpipe.%10$I(v_flow, greatest(p_batch, 1), v_now);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
            RETURN QUERY
            WITH picked AS (
                SELECT q.msg_id, q.read_ct, q.vt, %4$s AS started_at,
                       q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted,
                       q.read_ct > 0 AND q.message ->> 'failed' IS DISTINCT FROM q.read_ct::text AS lapsed
                  FROM pgmq.%2$I q
                 WHERE q.msg_id = ANY (v_ids) AND q.vt <= v_now
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
            -- the rate windows count the attempts just started
            IF v_flow.rate_count IS NOT NULL OR v_flow.key_rate_count IS NOT NULL THEN
                v_keys := ARRAY(SELECT drainpipe.job_key(m.message -> 'payload') FROM pgmq.%2$I m
                                 WHERE m.msg_id = ANY (v_ids) AND m.vt = v_until);
                PERFORM drainpipe.flow_record_claims(v_flow, v_keys, v_now);
            END IF;
        END
        $body$
        $fn$, 'flow_claim_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue, v_read_col,
              v_read_set, p_queue, v_archive_cols, v_archive_vals, 'claim_jobs__' || p_queue,
              'flow_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(drainpipe.queue_flow, integer, timestamptz) FROM PUBLIC', 'flow_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'flow_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'flow_claim_jobs__' || p_queue);
    END IF;
END
$define$;

-- jobs 0012's claim, calling the flow claim of a limited queue.
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
    IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = p_queue) THEN
        RETURN;  -- paused: nothing is handed out (jobs 0012)
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue) THEN
        -- limited: the pick its limits allow (jobs 0015; defined with the limits)
        RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'flow_claim_jobs__' || p_queue)
          USING p_lease, p_batch, p_now;
        RETURN;
    END IF;
    -- by name only, as release 0 did (see jobs 0002)
    IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'claim_jobs__' || p_queue)
      USING p_lease, p_batch, p_now;
END
$$;

-- jobs 0012's turn function, with the flow branch after the pause check.
CREATE OR REPLACE FUNCTION drainpipe.define_job_turn_function_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_ids bigint[], p_attempts integer[], p_lease double precision, p_batch integer,
            p_now timestamptz
        )
        RETURNS SETOF drainpipe.job_turn_row_v1
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        DECLARE
            v_done bigint[];
        BEGIN
            IF cardinality(p_ids) > 0 THEN
                PERFORM drainpipe.assert_turn_arrays(p_ids, p_attempts);
                v_done := ARRAY(SELECT drainpipe.%2$I(p_ids, p_attempts, p_now));
                IF cardinality(v_done) < cardinality(p_ids) THEN
                    RETURN QUERY SELECT * FROM drainpipe.refused_turn_rows(p_ids, p_attempts, v_done);
                END IF;
            END IF;
            IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = %4$L) THEN
                RETURN;  -- paused: the completions above stand, nothing is claimed
            END IF;
            IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = %4$L) THEN
                -- limited (jobs 0015): the flow claim, defined with the limits (plpgsql
                -- resolves the name when this branch first runs)
                RETURN QUERY
                SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                       c.last_error, false
                  FROM drainpipe.%5$I(p_lease, p_batch, p_now) AS c;
                RETURN;
            END IF;
            RETURN QUERY
            SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                   c.last_error, false
              FROM drainpipe.%3$I(p_lease, p_batch, p_now) AS c;
        END
        $body$
        $fn$, 'complete_and_claim_jobs__' || p_queue, 'complete_jobs__' || p_queue,
              'claim_jobs__' || p_queue, p_queue, 'flow_claim_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) FROM PUBLIC',
                   'complete_and_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) TO service_role',
                       'complete_and_claim_jobs__' || p_queue);
    END IF;
END
$define$;

-- Existing queues' turn functions, regenerated with the flow branch.
DO $regenerate$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regproc('drainpipe.complete_and_claim_jobs__' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.define_job_turn_function_v1(v_queue);
        END IF;
    END LOOP;
END
$regenerate$;

-- JobRecord.held_by of queued jobs: the table's job_flow_holds_v1 (see there), over each
-- limited queue's own table.
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
        IF to_regclass('pgmq.' || quote_ident('q_' || v_flow.queue)) IS NULL THEN
            CONTINUE;
        END IF;
        RETURN QUERY EXECUTE format($q$
            SELECT h.queue, h.id, h.held_by FROM (
                SELECT %1$L::text AS queue, j.msg_id AS id, CASE
                    WHEN ($3).ordered AND k.key IS NOT NULL AND EXISTS (
                             SELECT 1 FROM pgmq.%2$I e
                              WHERE drainpipe.job_key(e.message -> 'payload') = k.key
                                AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL
                                AND e.msg_id < j.msg_id) THEN 'order'
                    WHEN ($3).concurrency IS NOT NULL AND (
                             SELECT count(*) FROM pgmq.%2$I l
                              WHERE l.read_ct > 0 AND l.vt > $2
                                AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                         ) >= ($3).concurrency THEN 'concurrency'
                    WHEN ($3).key_concurrency IS NOT NULL AND k.key IS NOT NULL AND (
                             SELECT count(*) FROM pgmq.%2$I l
                              WHERE drainpipe.job_key(l.message -> 'payload') = k.key
                                AND l.read_ct > 0 AND l.vt > $2
                                AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                         ) >= ($3).key_concurrency THEN 'concurrency'
                    WHEN ($3).rate_count IS NOT NULL AND (
                             SELECT count(*) FROM drainpipe.flow_claims c
                              WHERE c.queue = %1$L
                                AND c.claimed_at > $2 - make_interval(secs => ($3).rate_per)
                         ) >= ($3).rate_count THEN 'rate'
                    WHEN ($3).key_rate_count IS NOT NULL AND k.key IS NOT NULL AND (
                             SELECT count(*) FROM drainpipe.flow_claims c
                              WHERE c.queue = %1$L AND c.key = k.key
                                AND c.claimed_at > $2 - make_interval(secs => ($3).key_rate_per)
                         ) >= ($3).key_rate_count THEN 'rate'
                    END AS held_by
                  FROM pgmq.%2$I j
                 CROSS JOIN LATERAL (SELECT drainpipe.job_key(j.message -> 'payload') AS key) k
                 WHERE j.msg_id = ANY ($1) AND j.read_ct = 0 AND j.vt <= $2
            ) h
            WHERE h.held_by IS NOT NULL
        $q$, v_flow.queue, 'q_' || v_flow.queue)
        USING ARRAY(SELECT w.id FROM unnest(p_queues, p_ids) AS w(queue, id)
                     WHERE w.queue = v_flow.queue),
              v_now, v_flow;
    END LOOP;
END
$$;

-- Debounce (enqueue_flow_job_v1): the table's debounce_job (see there), on the queue's table.
CREATE OR REPLACE FUNCTION drainpipe.debounce_job(
    p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_changed integer;
BEGIN
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('UPDATE pgmq.%I m
                       SET message = jsonb_set(m.message, ''{payload}'', coalesce($1, ''{}''::jsonb)),
                           vt = clock_timestamp() + make_interval(secs => greatest($2, 0))
                     WHERE m.msg_id = $3 AND m.read_ct = 0', 'q_' || p_queue)
      USING p_payload, p_seconds, p_id;
    GET DIAGNOSTICS v_changed = ROW_COUNT;
    RETURN v_changed > 0;
END
$$;
