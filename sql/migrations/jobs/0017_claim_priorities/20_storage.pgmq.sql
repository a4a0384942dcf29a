-- pgmq: priorities in the claim (10_priorities.sql). A prioritised queue's claim_jobs__q
-- (which claim_jobs_v1, the queue's turn function and the queue-wide flow claim call) is
-- replaced by the priority claim below, over an index of the queue's own table built then:
-- every other queue's claim is unchanged and pays nothing, not even a probe.

-- Built with the queue's first job with a non-zero priority (note_job_priority): the index
-- of its levels and the priority claim.
CREATE OR REPLACE FUNCTION drainpipe.ensure_priority_claim(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
END
$$;

-- The priority claim of p_queue: priority_pick_jobs__q, the table's
-- job_messages_priority_pick over the queue's table (one range of the index per level,
-- highest first, each from its own bound), and claim_jobs__q, jobs 0014's claim with that
-- pick in place of its own (a job whose last lease ran out is picked at its level, and
-- archived dead, not leased, as there).
CREATE OR REPLACE FUNCTION drainpipe.define_job_priority_claim_v1(p_queue text)
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
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    v_read_set := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at = v_now' ELSE '' END;
    v_read_col := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'q.last_read_at' ELSE 'NULL::timestamptz' END;
    v_archive_cols := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at' ELSE '' END;
    v_archive_vals := CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', d.last_read_at' ELSE '' END;

    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                      (drainpipe.job_priority(message -> ''payload''), vt, msg_id)',
                   'q_' || p_queue || '_dp_priority', 'q_' || p_queue);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_levels integer[], p_batch integer, p_now timestamptz, p_bound boolean
        )
        RETURNS bigint[]
        -- runs under the settings of its only caller, the claim below
        LANGUAGE plpgsql
        AS $body$
        DECLARE
            v_level integer;
            v_ids bigint[] := '{}';
            v_take bigint[];
            v_need integer;
            v_first timestamptz;
            v_from timestamptz;
        BEGIN
            FOREACH v_level IN ARRAY p_levels LOOP
                v_need := p_batch - cardinality(v_ids);
                v_from := CASE WHEN p_bound
                               THEN drainpipe.claim_bound(drainpipe.priority_bound_name(%3$L, v_level), p_now)
                               ELSE '-infinity' END;
                LOOP
                    SELECT array_agg(p.msg_id), min(p.vt) INTO v_take, v_first
                      FROM (
                          SELECT q.msg_id, q.vt
                            FROM pgmq.%2$I q
                           -- the level's range, [v_from, p_now], as row comparisons: only
                           -- the priority index serves them (a generic plan would
                           -- otherwise take the vt index and filter by level)
                           WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt) >= (v_level, v_from)
                             AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                           ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id
                           LIMIT v_need
                             FOR UPDATE SKIP LOCKED
                      ) p;
                    EXIT WHEN v_from = '-infinity' OR coalesce(cardinality(v_take), 0) >= v_need;
                    v_from := '-infinity';  -- short above the bound: this level from its start
                END LOOP;
                IF p_bound THEN
                    PERFORM drainpipe.keep_claim_bound(drainpipe.priority_bound_name(%3$L, v_level),
                                                       v_first, NULL);
                END IF;
                v_ids := v_ids || coalesce(v_take, '{}');
                EXIT WHEN cardinality(v_ids) >= p_batch;
            END LOOP;
            RETURN v_ids;
        END
        $body$
        $fn$, 'priority_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue);

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
            v_now timestamptz := coalesce(p_now, clock_timestamp());
            v_until timestamptz := v_now + make_interval(secs => greatest(p_lease, 0));
            v_levels integer[];
            v_ids bigint[];
        BEGIN
            SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = %6$L;
            v_ids := drainpipe.%9$I(coalesce(v_levels, '{0}'), greatest(p_batch, 1), v_now, p_now IS NULL);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
            RETURN QUERY
            WITH picked AS (
                SELECT q.msg_id, q.read_ct, q.vt, %4$s AS started_at,
                       q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted,
                       q.read_ct > 0 AND q.message ->> 'failed' IS DISTINCT FROM q.read_ct::text AS lapsed
                  FROM pgmq.%2$I q
                 WHERE q.msg_id = ANY (v_ids)
                   FOR UPDATE
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
        END
        $body$
        $fn$, 'claim_jobs__' || p_queue, 'q_' || p_queue, 'a_' || p_queue, v_read_col,
              v_read_set, p_queue, v_archive_cols, v_archive_vals, 'priority_pick_jobs__' || p_queue);
    -- The limited pick along the levels (jobs 0015's flow_pick_jobs__q, same signature, which
    -- the queue's flow claim calls): candidates come in chunks of one level's range, in
    -- (vt, msg_id) order, highest level first; the filter is jobs 0015's.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
        )
        RETURNS bigint[]
        LANGUAGE plpgsql
        AS $body$
        DECLARE
            v_room integer;
            v_ids bigint[] := '{}';
            v_keys text[] := '{}';
            v_chunk integer;
            v_scanned integer := 0;
            v_bound integer := p_batch * 50 + 500;
            v_after_at timestamptz := '-infinity';
            v_after_id bigint := 0;
            v_rows integer;
            v_take bigint[];
            v_take_keys text[];
            v_levels integer[];
            v_level integer;
            v_n integer := 1;
            v_c_ids bigint[];
            v_c_at timestamptz[];
            v_c_keys text[];
            v_c_gone boolean[];
        BEGIN
            SELECT coalesce(p.levels, '{0}') INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = %3$L;
            v_levels := coalesce(v_levels, '{0}');
            v_level := v_levels[1];
            PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
            v_room := drainpipe.flow_room(p_flow, p_batch,
                CASE WHEN p_flow.concurrency IS NULL THEN 0 ELSE (
                    SELECT count(*) FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > p_now) END,
                p_now);
            v_chunk := 2 * v_room + 8;
            WHILE v_room > 0 AND v_scanned < v_bound LOOP
                SELECT array_agg(c.msg_id ORDER BY c.vt, c.msg_id), array_agg(c.vt ORDER BY c.vt, c.msg_id),
                       array_agg(c.k ORDER BY c.vt, c.msg_id), array_agg(c.exhausted ORDER BY c.vt, c.msg_id)
                  INTO v_c_ids, v_c_at, v_c_keys, v_c_gone
                  FROM (SELECT q.msg_id, q.vt, drainpipe.job_key(q.message -> 'payload') AS k,
                               q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                          FROM pgmq.%2$I q
                         -- the level's range after the last candidate (see the pick above)
                         WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id)
                                   > (v_level, v_after_at, v_after_id)
                           AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                         ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id
                         LIMIT v_chunk) c;
                v_rows := coalesce(cardinality(v_c_ids), 0);
                WITH chunk AS (
                    SELECT c.id, c.k, c.exhausted, v_n + c.n AS seq
                      FROM unnest(v_c_ids, v_c_keys, v_c_gone) WITH ORDINALITY AS c(id, k, exhausted, n)
                ), ranked AS (
                    SELECT c.*, row_number() OVER (PARTITION BY c.k ORDER BY c.seq) AS nth,
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
                    SELECT r.id, r.k, r.seq
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
                     ORDER BY r.seq
                     LIMIT v_room
                )
                SELECT array_agg(a.id ORDER BY a.seq), array_agg(a.k ORDER BY a.seq)
                  INTO v_take, v_take_keys
                  FROM allowed a;
                IF v_take IS NOT NULL THEN
                    v_ids := v_ids || v_take;
                    v_keys := v_keys || v_take_keys;
                    v_room := v_room - cardinality(v_take);
                END IF;
                -- the exhausted ones ride along (archived, not leased, by the claim)
                v_ids := v_ids || ARRAY(SELECT c.id FROM unnest(v_c_ids, v_c_gone) AS c(id, gone) WHERE c.gone);
                v_n := v_n + v_rows;
                v_scanned := v_scanned + v_rows;
                IF v_rows < v_chunk THEN
                    -- this level has no more candidates: the next one, from its start
                    EXIT WHEN v_level = v_levels[cardinality(v_levels)];
                    v_level := v_levels[array_position(v_levels, v_level) + 1];
                    v_after_at := '-infinity';
                    v_after_id := 0;
                ELSE
                    v_after_at := v_c_at[v_rows];
                    v_after_id := v_c_ids[v_rows];
                    v_chunk := least(v_chunk * 4, v_bound);
                END IF;
            END LOOP;
            RETURN v_ids;
        END
        $body$
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(drainpipe.queue_flow, integer, timestamptz) FROM PUBLIC',
                   'flow_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(integer[], integer, timestamptz, boolean) FROM PUBLIC',
                   'priority_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'claim_jobs__' || p_queue);
    END IF;
END
$define$;

-- jobs 0015's flow functions, keeping a prioritised queue's limited pick by level.
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
                    -- the session's last count under the gate, while far from the limit
                    -- (jobs 0017, flow_leased_hint), else a count
                    v_leased := drainpipe.flow_leased_hint(v_flow);
                    IF v_leased IS NULL THEN
                        SELECT count(*) INTO v_leased FROM pgmq.%2$I l
                         WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                           AND l.vt > v_now;
                    END IF;
                END IF;
                v_beside := drainpipe.flow_gate(v_flow, greatest(p_batch, 1), v_leased);
                IF v_flow.concurrency IS NOT NULL THEN
                    -- again, under the lock: what committed while this claim waited counts
                    SELECT count(*) INTO v_leased FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > v_now;
                    PERFORM drainpipe.keep_flow_leased(%6$L, v_leased);
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
    IF EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        -- a prioritised queue's limited pick goes along its levels (jobs 0017)
        PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
    END IF;
END
$define$;


-- jobs 0014's queue functions, keeping a prioritised queue's priority claim.
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
            v_from timestamptz := '-infinity';  -- the bound (jobs 0014)
            v_below timestamptz := 'infinity';  -- the pass under the bound
        BEGIN
            IF p_now IS NULL THEN
                v_from := drainpipe.claim_bound(%6$L, clock_timestamp());
            END IF;
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
                     -- the vt index read from its start: only visible rows are visited, so jobs
                     -- leased or backing off ahead of the ready ones cost nothing (in msg_id
                     -- order every one of them was read and filtered out). Visible first by
                     -- visibility time, as on the table backend; for jobs enqueued and never
                     -- claimed that is their enqueue order.
                     WHERE q.vt <= v_now
                       AND q.vt >= v_from AND q.vt < v_below  -- the bound: entries below are not visited
                     ORDER BY q.vt
                     LIMIT v_batch
                       FOR UPDATE SKIP LOCKED
                ), bound AS (
                    -- the oldest vt picked: this connection's next bound (volatile, so
                    -- evaluated once, where the update's id list reads it)
                    SELECT drainpipe.keep_claim_bound(%6$L, min(p.vt), p_now) AS kept FROM picked p
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
                 WHERE m.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p, bound b WHERE NOT p.exhausted))
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message -> 'payload',
                          coalesce((m.message ->> 'max_attempts')::integer, 5), m.message ->> 'last_error';
                GET DIAGNOSTICS v_claimed = ROW_COUNT;
                IF v_claimed < v_batch AND v_from > '-infinity' THEN
                    -- short above the bound: the rest from below it (the index's start up
                    -- to the bound; what this claim took has its lease's vt now, not below)
                    v_below := v_from;
                    v_from := '-infinity';
                    v_batch := v_batch - v_claimed;
                    CONTINUE;
                END IF;
                EXIT WHEN v_claimed > 0;
                -- nothing taken: look again at everything visible. The pass below the bound
                -- is over: a job that became visible above it meanwhile (an enqueue that
                -- committed during this claim) would otherwise be found here and never
                -- picked, and the loop would spin
                v_below := 'infinity';
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
    IF EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        -- a prioritised queue keeps its priority claim (jobs 0017)
        PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
    END IF;
END
$define$;


-- -- enqueue: jobs 0013's, noting a non-zero priority ---------------------------------------

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
    IF p_payload ? 'priority' THEN
        -- a non-zero priority: the queue's claims order by it from now on (10_priorities.sql)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
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
    IF p_payloads @? '$[*].priority' THEN
        -- a non-zero priority among them: see enqueue_job_v1
        PERFORM drainpipe.note_job_priorities(p_queue, p_payloads);
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

-- -- debounce: jobs 0015's, noting the new payload's priority -------------------------------

-- Debounce (enqueue_flow_job_v1), jobs 0015's: the table's debounce_job (see there), on the
-- queue's table.
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
    IF p_payload ? 'priority' THEN
        -- the new payload's priority is a level the claim reads (jobs 0017)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
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

-- Jobs enqueued with a priority before this migration (stored, not yet ordered by): their
-- queues and levels are noted now (which regenerates those queues' claims), so none is left
-- at a level its claim does not read.
DO $noted$
DECLARE
    v_queue text;
    v_level integer;
    v_levels integer[];
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regclass('pgmq.' || quote_ident('q_' || v_queue)) IS NULL THEN
            CONTINUE;
        END IF;
        -- read whole first: noting builds an index on the table the read would still use
        EXECUTE format(
            'SELECT ARRAY(SELECT DISTINCT drainpipe.job_priority(q.message -> ''payload'') FROM pgmq.%I q
              WHERE q.message -> ''payload'' ? ''priority''
                AND drainpipe.job_priority(q.message -> ''payload'') <> 0)', 'q_' || v_queue)
          INTO v_levels;
        FOREACH v_level IN ARRAY v_levels
        LOOP
            PERFORM drainpipe.note_job_priority(v_queue, v_level);
        END LOOP;
    END LOOP;
END
$noted$;

-- Existing limited queues: their flow claim regenerated with the hint (10_priorities.sql).
DO $limited$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT f.queue FROM drainpipe.queue_flow f LOOP
        IF to_regclass('pgmq.' || quote_ident('q_' || v_queue)) IS NOT NULL THEN
            PERFORM drainpipe.ensure_flow_indexes(v_queue);
        END IF;
    END LOOP;
END
$limited$;
