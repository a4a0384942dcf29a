-- pgmq: a claim past held keys stays flat (issue 38), as on the table (20_storage.table.sql
-- of this migration): a limited queue's flow pick (flow_pick_jobs__q, and its variant along
-- the priority levels of a prioritised queue) reads its candidates in passes, each one
-- statement that probes each candidate's key (at most key_concurrency entries of the
-- queue's leased index, not a count) and locks the ones that fit as it reaches them; the
-- flow claim no longer locks them again. The index of a key's jobs in enqueue order is built
-- for an ordered queue only. The generators are jobs 0017's otherwise, and every limited
-- queue's functions are generated again below. define_job_queue_functions_v1
-- (the unlimited claim, with 0014's bound and 0017's priority variant) is unchanged.

-- jobs 0017's priority claim, with the limited pick along the levels in passes.
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
    -- The limited pick along the levels (the flow pick of ensure_flow_indexes, same
    -- signature, which the queue's flow claim calls): the same passes, each over one level's
    -- range of this index in (vt, msg_id) order, highest level first.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
        )
        RETURNS bigint[]
        LANGUAGE plpgsql
        AS $body$
        DECLARE
            v_room integer;
            v_limit integer;
            v_ids bigint[] := '{}';
            v_keys text[] := '{}';
            v_chunk integer;
            v_scanned integer := 0;
            v_bound integer := p_batch * 50 + 500;
            v_after_at timestamptz := '-infinity';
            v_after_id bigint := 0;
            v_rows integer;
            v_levels integer[];
            v_level integer;
            v_last_at timestamptz;
            v_last_id bigint;
            v_r record;
            v_taken bigint;
        BEGIN
            SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = %3$L;
            v_levels := coalesce(v_levels, '{0}');
            v_level := v_levels[1];
            PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
            IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
                v_room := p_batch;
            ELSE
                v_room := drainpipe.flow_room(p_flow, p_batch,
                    CASE WHEN p_flow.concurrency IS NULL THEN 0 ELSE (
                        SELECT count(*) FROM pgmq.%2$I l
                         WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                           AND l.vt > p_now) END,
                    p_now);
            END IF;
            v_chunk := least(2 * v_room + 8, v_bound);
            WHILE v_room > 0 LOOP
                v_limit := v_room;
                v_rows := 0;
                FOR v_r IN
                    SELECT c.id, c.vt, c.k, c.leased, c.claimed, c.exhausted
                      FROM (
                          SELECT c0.*,
                                 CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL OR c0.exhausted THEN 0 ELSE (
                                     SELECT count(*) FROM (
                                         SELECT 1 FROM pgmq.%2$I l
                                          WHERE drainpipe.job_key(l.message -> 'payload') = c0.k
                                            AND l.read_ct > 0
                                            AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                                            AND l.vt > p_now
                                          LIMIT p_flow.key_concurrency) s) END AS leased,
                                 CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL OR c0.exhausted THEN 0 ELSE (
                                     SELECT count(*) FROM (
                                         SELECT 1 FROM drainpipe.flow_claims r
                                          WHERE r.queue = %3$L AND r.key = c0.k
                                            AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                          LIMIT p_flow.key_rate_count) s) END AS claimed,
                                 CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                                     SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                            FROM (SELECT q.msg_id AS id, q.vt, drainpipe.job_key(q.message -> 'payload') AS k,
                                         q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                                    FROM pgmq.%2$I q
                                   -- the level's range after the last place read, as row
                                   -- comparisons: only the priority index serves them
                                   WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id)
                                             > (v_level, v_after_at, v_after_id)
                                     AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                                   ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id
                                   LIMIT v_chunk) c0
                          OFFSET 0) c
                     CROSS JOIN LATERAL (
                          SELECT 1 FROM pgmq.%2$I z WHERE z.msg_id = c.id AND z.vt <= p_now
                             FOR UPDATE SKIP LOCKED) y
                     WHERE c.exhausted OR c.k IS NULL
                        OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                            AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                            AND (NOT p_flow.ordered
                                 OR (c.picked = 0 AND NOT EXISTS (
                                        SELECT 1 FROM pgmq.%2$I e
                                         WHERE drainpipe.job_key(e.message -> 'payload') = c.k
                                           AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL
                                           AND e.msg_id < c.id))))
                     LIMIT v_limit
                LOOP
                    v_rows := v_rows + 1;
                    v_last_at := v_r.vt;
                    v_last_id := v_r.id;
                    IF v_r.exhausted THEN
                        v_ids := v_ids || v_r.id;
                        CONTINUE;
                    END IF;
                    IF v_r.k = ANY (v_keys) THEN
                        v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                        CONTINUE WHEN p_flow.ordered
                            OR (p_flow.key_concurrency IS NOT NULL
                                AND v_r.leased + v_taken >= p_flow.key_concurrency)
                            OR (p_flow.key_rate_count IS NOT NULL
                                AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                    END IF;
                    v_ids := v_ids || v_r.id;
                    v_keys := v_keys || v_r.k;
                    v_room := v_room - 1;
                END LOOP;
                EXIT WHEN v_room = 0;
                v_scanned := v_scanned + v_chunk;
                IF v_rows < v_limit THEN
                    -- a short pass read its whole chunk: where did the chunk end?
                    v_last_at := NULL;
                    SELECT q.vt, q.msg_id INTO v_last_at, v_last_id
                      FROM pgmq.%2$I q
                     WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id)
                               > (v_level, v_after_at, v_after_id)
                       AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                     ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id
                    OFFSET v_chunk - 1 LIMIT 1;
                    IF v_last_at IS NULL THEN
                        -- the chunk held every candidate left: the next level from its start
                        EXIT WHEN v_level = v_levels[cardinality(v_levels)];
                        v_level := v_levels[array_position(v_levels, v_level) + 1];
                        v_last_at := '-infinity';
                        v_last_id := 0;
                    ELSE
                        v_chunk := v_chunk * 4;
                    END IF;
                END IF;
                v_after_at := v_last_at;
                v_after_id := v_last_id;
                EXIT WHEN v_scanned >= v_bound;
                v_chunk := least(v_chunk, v_bound - v_scanned);
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

-- jobs 0017's flow functions, with the pick in passes and the claim that no longer locks.
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
    -- a key's jobs in enqueue order (every row of the queue table is live): ordered=True,
    -- and only then (jobs 0021: every claim and enqueue of the queue writes an entry in it;
    -- ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                          (drainpipe.job_key(message -> ''payload''), msg_id)
                        WHERE drainpipe.job_key(message -> ''payload'') IS NOT NULL',
                       'q_' || p_queue || '_dp_flow_order', 'q_' || p_queue);
    END IF;

    -- The pick: the table's job_messages_flow_take (jobs 0021) over this queue's table (see
    -- there): passes in vt order, as the unlimited claim reads, each probing its candidates'
    -- keys and locking the ones that fit as it reaches them. A pass starts at the last vt
    -- read, leaving out the rows of that vt already taken or passed (pgmq stamps a batch with
    -- one vt). A job whose last lease ran out is let through without counting: the claim
    -- archives it dead instead of leasing it. Returns the ids taken, those with them.
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
            v_limit integer;
            v_ids bigint[] := '{}';
            v_keys text[] := '{}';
            v_chunk integer;
            v_scanned integer := 0;
            v_bound integer := p_batch * 50 + 500;
            v_after timestamptz := '-infinity';
            v_tied bigint[] := '{}';
            v_rows integer;
            v_last timestamptz;
            v_last_ids bigint[];
            v_r record;
            v_taken bigint;
        BEGIN
            IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
                -- no queue-wide limit: the whole batch under the queue's flow lock
                PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
                v_room := p_batch;
            ELSE
                PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
                v_room := drainpipe.flow_room(p_flow, p_batch,
                    CASE WHEN p_flow.concurrency IS NULL THEN 0 ELSE (
                        SELECT count(*) FROM pgmq.%2$I l
                         WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                           AND l.vt > p_now) END,
                    p_now);
            END IF;
            v_chunk := least(2 * v_room + 8, v_bound);
            WHILE v_room > 0 LOOP
                v_limit := v_room;
                v_rows := 0;
                v_last := NULL;
                FOR v_r IN
                    SELECT c.id, c.vt, c.k, c.leased, c.claimed, c.exhausted
                      FROM (
                          -- each candidate's probes, once (OFFSET 0: not flattened into the
                          -- filter and the output, which would probe twice); none for an
                          -- exhausted job, which is archived whatever its key
                          SELECT c0.*,
                                 CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL OR c0.exhausted THEN 0 ELSE (
                                     SELECT count(*) FROM (
                                         SELECT 1 FROM pgmq.%2$I l
                                          WHERE drainpipe.job_key(l.message -> 'payload') = c0.k
                                            AND l.read_ct > 0
                                            AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                                            AND l.vt > p_now
                                          LIMIT p_flow.key_concurrency) s) END AS leased,
                                 CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL OR c0.exhausted THEN 0 ELSE (
                                     SELECT count(*) FROM (
                                         SELECT 1 FROM drainpipe.flow_claims r
                                          WHERE r.queue = %3$L AND r.key = c0.k
                                            AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                          LIMIT p_flow.key_rate_count) s) END AS claimed,
                                 CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                                     SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                            FROM (SELECT q.msg_id AS id, q.vt, drainpipe.job_key(q.message -> 'payload') AS k,
                                         q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                                    FROM pgmq.%2$I q
                                   WHERE q.vt <= p_now AND q.vt >= v_after AND NOT (q.msg_id = ANY (v_tied))
                                   ORDER BY q.vt
                                   LIMIT v_chunk) c0
                          OFFSET 0) c
                     -- the lock, row by row as candidates fit: a row another transaction
                     -- holds is skipped, and one changed since is read as it is now
                     CROSS JOIN LATERAL (
                          SELECT 1 FROM pgmq.%2$I z WHERE z.msg_id = c.id AND z.vt <= p_now
                             FOR UPDATE SKIP LOCKED) y
                     WHERE c.exhausted OR c.k IS NULL
                        OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                            AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                            AND (NOT p_flow.ordered
                                 OR (c.picked = 0 AND NOT EXISTS (
                                        SELECT 1 FROM pgmq.%2$I e
                                         WHERE drainpipe.job_key(e.message -> 'payload') = c.k
                                           AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL
                                           AND e.msg_id < c.id))))
                     LIMIT v_limit
                LOOP
                    v_rows := v_rows + 1;
                    IF v_r.vt = v_last THEN
                        v_last_ids := v_last_ids || v_r.id;
                    ELSE
                        v_last := v_r.vt;
                        v_last_ids := ARRAY[v_r.id];
                    END IF;
                    IF v_r.exhausted THEN
                        -- rides along: archived, not leased, by the claim
                        v_ids := v_ids || v_r.id;
                        CONTINUE;
                    END IF;
                    IF v_r.k = ANY (v_keys) THEN
                        -- a key this claim took already, in this pass too: counted exactly
                        v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                        CONTINUE WHEN p_flow.ordered
                            OR (p_flow.key_concurrency IS NOT NULL
                                AND v_r.leased + v_taken >= p_flow.key_concurrency)
                            OR (p_flow.key_rate_count IS NOT NULL
                                AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                    END IF;
                    v_ids := v_ids || v_r.id;
                    v_keys := v_keys || v_r.k;
                    v_room := v_room - 1;
                END LOOP;
                EXIT WHEN v_room = 0;
                v_scanned := v_scanned + v_chunk;
                IF v_rows < v_limit THEN
                    -- a short pass read its whole chunk: where did the chunk end?
                    WITH chunk AS MATERIALIZED (
                        SELECT q.msg_id, q.vt FROM pgmq.%2$I q
                         WHERE q.vt <= p_now AND q.vt >= v_after AND NOT (q.msg_id = ANY (v_tied))
                         ORDER BY q.vt
                         LIMIT v_chunk
                    )
                    SELECT count(*), max(c.vt),
                           ARRAY(SELECT x.msg_id FROM chunk x WHERE x.vt = (SELECT max(y.vt) FROM chunk y))
                      INTO v_rows, v_last, v_last_ids
                      FROM chunk c;
                    -- the chunk held every candidate left
                    EXIT WHEN v_rows < v_chunk;
                    v_chunk := v_chunk * 4;
                END IF;
                -- on after the last row read (a full pass: the last it returned)
                v_tied := CASE WHEN v_last = v_after THEN v_tied ELSE '{}' END || v_last_ids;
                v_after := v_last;
                EXIT WHEN v_scanned >= v_bound;
                v_chunk := least(v_chunk, v_bound - v_scanned);
            END LOOP;
            RETURN v_ids;
        END
        $body$
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue);

    -- The claim: jobs 0006's statement with the pick above, whose rows are locked already
    -- (by the pick, as it read them: jobs 0021).
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
                 -- locked by the pick (jobs 0021), so read as the pick left them
                 WHERE q.msg_id = ANY (v_ids) AND q.vt <= v_now
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

-- Existing limited queues: their flow pick and claim generated again (a prioritised one's
-- pick along its levels too: ensure_flow_indexes calls define_job_priority_claim_v1).
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
