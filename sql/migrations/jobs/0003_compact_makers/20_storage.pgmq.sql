-- The pgmq per-queue function makers, shorter: the lease statement's columns and tail that
-- the claim, the priority claim and the flow claim share, and the flow picks' pass, are
-- written once (pgmq_lease_cols, pgmq_lease_sql, pgmq_flow_pick_sql). The functions they
-- make are the same statements. The newest-first listing writes its union of a queue's two
-- tables once, and the overview reads the archive's two series in one statement.

CREATE OR REPLACE FUNCTION drainpipe.pgmq_lease_cols(p_queue text)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- what a claim reads of a row it leases (pgmq 1.5+ stamps last_read_at, the attempt's start)
    SELECT format('q.read_ct, q.vt, %s AS started_at,
                       q.read_ct >= coalesce((q.message ->> ''max_attempts'')::integer, 5) AS exhausted,
                       q.read_ct > 0 AND q.message ->> ''failed'' IS DISTINCT FROM q.read_ct::text AS lapsed',
                  CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'q.last_read_at' ELSE 'NULL::timestamptz' END) $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_lease_sql(p_queue text, p_leased text)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- after a claim's "picked" rows: a lapsed lease's attempt ends, an exhausted job is
    -- archived dead, the rows p_leased names are leased and returned
    SELECT format($sql$), expired AS (
                INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
                SELECT %1$L, p.msg_id, p.read_ct, p.started_at, p.vt, 'expired', 'LEASE_EXPIRED'
                  FROM picked p WHERE p.lapsed
                ON CONFLICT DO NOTHING
            ), dead AS (
                DELETE FROM pgmq.%2$I d
                 WHERE d.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE p.exhausted))
                RETURNING d.*
            ), archived AS (
                INSERT INTO pgmq.%3$I (msg_id, read_ct, enqueued_at, vt, message, archived_at%4$s)
                SELECT d.msg_id, d.read_ct, d.enqueued_at, d.vt,
                       d.message || '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}'::jsonb,
                       d.vt%5$s
                  FROM dead d
            )
            UPDATE pgmq.%2$I m
               SET vt = v_until,
                   read_ct = m.read_ct + 1%6$s
             WHERE %7$s
            RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message -> 'payload',
                      coalesce((m.message ->> 'max_attempts')::integer, 5), m.message ->> 'last_error';$sql$,
        p_queue, 'q_' || p_queue, 'a_' || p_queue,
        CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at' ELSE '' END,
        CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', d.last_read_at' ELSE '' END,
        CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN ', last_read_at = v_now' ELSE '' END,
        p_leased) $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_flow_pick_sql(p_queue text, p_range text, p_track text)
 RETURNS text LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- a flow pick's pass (ensure_flow_indexes; define_job_priority_claim_v1 along the levels):
    -- the next candidates of p_range, those whose keys the limits let through, locked and
    -- taken; p_track notes where the pass got to
    SELECT format($sql$FOR v_r IN
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
                                          WHERE r.queue = %1$L AND r.key = c0.k
                                            AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                          LIMIT p_flow.key_rate_count) s) END AS claimed,
                                 CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                                     SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                            FROM (SELECT q.msg_id AS id, q.vt, drainpipe.job_key(q.message -> 'payload') AS k,
                                         q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted
                                    FROM pgmq.%2$I q
                                   %3$s
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
                    %4$s
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
                END LOOP;$sql$,
        p_queue, 'q_' || p_queue, p_range, p_track) $function$;

CREATE OR REPLACE FUNCTION drainpipe.define_job_priority_claim_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
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
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_now timestamptz := coalesce(p_now, clock_timestamp());
            v_until timestamptz := v_now + make_interval(secs => greatest(p_lease, 0));
            v_levels integer[];
            v_ids bigint[];
        BEGIN
            SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = %5$L;
            v_ids := drainpipe.%6$I(coalesce(v_levels, '{0}'), greatest(p_batch, 1), v_now, p_now IS NULL);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
            RETURN QUERY
            WITH picked AS (
                SELECT q.msg_id, %3$s
                  FROM pgmq.%2$I q
                 WHERE q.msg_id = ANY (v_ids)
                   FOR UPDATE
            %4$s
        END
        $body$
        $fn$, 'claim_jobs__' || p_queue, 'q_' || p_queue, drainpipe.pgmq_lease_cols(p_queue),
              drainpipe.pgmq_lease_sql(p_queue, 'm.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE NOT p.exhausted))'),
              p_queue, 'priority_pick_jobs__' || p_queue);
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
                %4$s
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
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue,
              drainpipe.pgmq_flow_pick_sql(p_queue, $r$
                -- the level's range after the last place read, as row comparisons: only
                -- the priority index serves them
                WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id) > (v_level, v_after_at, v_after_id)
                  AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id$r$,
              'v_last_at := v_r.vt; v_last_id := v_r.id;'));
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(drainpipe.queue_flow, integer, timestamptz) FROM PUBLIC',
                   'flow_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(integer[], integer, timestamptz, boolean) FROM PUBLIC',
                   'priority_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'claim_jobs__' || p_queue);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.define_job_queue_functions_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    -- pgmq 1.5+: the archive keeps last_read_at, the attempt's start
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
        SET plan_cache_mode = force_generic_plan
        SET enable_seqscan = off
        AS $body$
        DECLARE
            v_claimed bigint;
            v_now timestamptz;
            v_until timestamptz;
            v_batch integer := greatest(p_batch, 1);
            v_from timestamptz := '-infinity';  -- this connection's claim bound
            v_below timestamptz := 'infinity';  -- the pass under the bound
        BEGIN
            IF p_now IS NULL THEN
                v_from := drainpipe.claim_bound(%5$L, clock_timestamp());
            END IF;
            LOOP
                v_now := coalesce(p_now, clock_timestamp());
                v_until := v_now + make_interval(secs => greatest(p_lease, 0));
                RETURN QUERY
                WITH picked AS (
                    SELECT q.msg_id, %3$s
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
                    SELECT drainpipe.keep_claim_bound(%5$L, min(p.vt), p_now) AS kept FROM picked p
                %4$s
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
        $fn$, 'claim_jobs__' || p_queue, 'q_' || p_queue, drainpipe.pgmq_lease_cols(p_queue),
              drainpipe.pgmq_lease_sql(p_queue, 'm.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p, bound b WHERE NOT p.exhausted))'),
              p_queue);
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
        -- a prioritised queue keeps its priority claim
        PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f
                WHERE f.queue = p_queue AND drainpipe.flow_budget_applies(f)) THEN
        -- a queue-wide concurrency only: what is leased by vt alone, for the exact counts;
        -- a lease then evaluates no key for an index
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt)
                        WHERE read_ct > 0 AND (message ->> ''failed'') IS DISTINCT FROM (read_ct::text)',
                       'q_' || p_queue || '_dp_flow_leased_vt', 'q_' || p_queue);
    ELSE
        -- what is leased (claimed, not failed; a lapsed lease reads vt <= now), per key:
        -- concurrency and key_concurrency count here, bounded by the limits
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                          (drainpipe.job_key(message -> ''payload''), vt)
                        WHERE read_ct > 0 AND (message ->> ''failed'') IS DISTINCT FROM (read_ct::text)',
                       'q_' || p_queue || '_dp_flow_leased', 'q_' || p_queue);
    END IF;
    -- a key's jobs in enqueue order (every row of the queue table is live): ordered=True only
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I
                          (drainpipe.job_key(message -> ''payload''), msg_id)
                        WHERE drainpipe.job_key(message -> ''payload'') IS NOT NULL',
                       'q_' || p_queue || '_dp_flow_order', 'q_' || p_queue);
    END IF;
    -- The pick, as the table storage's job_messages_flow_take: passes in vt order, as the
    -- unlimited claim reads, each probing its candidates' keys and locking the ones that fit
    -- as it reaches them. A pass starts at the last vt read, leaving out the rows of that vt
    -- already taken or passed (pgmq stamps a batch with one vt). A job whose last lease ran
    -- out is let through without counting: the claim archives it dead instead of leasing it.
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
            PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%3$L));
            IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
                v_room := p_batch;  -- no queue-wide limit: the whole batch
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
                v_last := NULL;
                %4$s
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
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue,
              drainpipe.pgmq_flow_pick_sql(p_queue,
                  $r$WHERE q.vt <= p_now AND q.vt >= v_after AND NOT (q.msg_id = ANY (v_tied)) ORDER BY q.vt$r$,
              'IF v_r.vt = v_last THEN v_last_ids := v_last_ids || v_r.id;
               ELSE v_last := v_r.vt; v_last_ids := ARRAY[v_r.id]; END IF;'));
    -- The claim: the unlimited claim's lease statement over the rows the pick locked.
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
            v_taken bigint;
        BEGIN
            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %6$L;
            IF v_flow.queue IS NULL THEN
                -- the limits were dropped since the caller looked
                RETURN QUERY SELECT * FROM drainpipe.%7$I(p_lease, p_batch, p_now);
                RETURN;
            END IF;
            IF v_flow.key_concurrency IS NULL AND v_flow.key_rate_count IS NULL AND NOT v_flow.ordered THEN
                -- queue-wide limits only: the unlimited claim, no larger than the room left
                IF v_flow.concurrency IS NOT NULL THEN
                    -- from the queue's budget while far from the limit, without a count;
                    -- else counted under the flow lock
                    v_room := drainpipe.flow_budget_take(v_flow, greatest(p_batch, 1));
                END IF;
                IF v_room IS NULL THEN
                    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%6$L));
                    IF v_flow.concurrency IS NOT NULL THEN
                        SELECT count(*) INTO v_leased FROM pgmq.%2$I l WHERE %9$s;
                    END IF;
                    v_room := drainpipe.flow_room(v_flow, greatest(p_batch, 1), v_leased, v_now);
                    IF v_flow.concurrency IS NOT NULL THEN
                        PERFORM drainpipe.flow_budget_reset(v_flow, v_leased, v_room);
                    END IF;
                ELSIF v_room < 0 THEN
                    -- the budget ran out under the shared lock: its chunks count as leased
                    v_beside := drainpipe.flow_budget_pending(%6$L);
                    v_room := 0;
                    IF v_beside >= 0 THEN
                        SELECT count(*) INTO v_leased FROM pgmq.%2$I l WHERE %9$s;
                        v_room := drainpipe.flow_room(v_flow, greatest(p_batch, 1), v_leased + v_beside, v_now);
                    END IF;
                END IF;
                IF v_room = 0 THEN
                    RETURN;
                END IF;
                IF v_flow.rate_count IS NULL THEN
                    RETURN QUERY SELECT * FROM drainpipe.%7$I(p_lease, v_room, v_now);
                    RETURN;
                END IF;
                v_rows := ARRAY(SELECT c FROM drainpipe.%7$I(p_lease, v_room, v_now) c);
                PERFORM drainpipe.flow_record_claims(v_flow,
                    ARRAY(SELECT drainpipe.job_key((r).payload) FROM unnest(v_rows) r), v_now);
                RETURN QUERY SELECT (r).* FROM unnest(v_rows) r;
                RETURN;
            END IF;
            v_room := greatest(p_batch, 1);
            IF v_flow.rate_count IS NULL AND v_flow.key_rate_count IS NULL AND NOT v_flow.ordered THEN
                -- key_concurrency (and perhaps concurrency) alone: the queue's flow lock, on a
                -- queue without priorities (a prioritised one's pick goes along its levels)
                PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(%6$L))
                  WHERE NOT EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = %6$L);
                v_taken := CASE WHEN FOUND THEN 0 END;
            END IF;
            IF v_taken IS NOT NULL THEN
                -- the pick's first pass and the lease in one statement
                -- (key_claim_in_one_statement); under the lock, every limited claim before
                -- this one has committed when its snapshot is taken
                IF v_flow.concurrency IS NOT NULL THEN
                    SELECT count(*) INTO v_leased FROM pgmq.%2$I l WHERE %9$s;
                    v_room := drainpipe.flow_room(v_flow, v_room, v_leased, v_now);
                    IF v_room = 0 THEN
                        RETURN;
                    END IF;
                END IF;
                RETURN QUERY
                WITH picked AS (
                    SELECT c.id AS msg_id, y.at, c.k, y.read_ct, y.vt, y.started_at, y.exhausted, y.lapsed
                      FROM (SELECT r.ctid AS at, r.msg_id AS id, drainpipe.job_key(r.message -> 'payload') AS k,
                                   r.read_ct >= coalesce((r.message ->> 'max_attempts')::integer, 5) AS exhausted
                              FROM pgmq.%2$I r
                             WHERE r.vt <= v_now
                             ORDER BY r.vt
                             LIMIT 2 * v_room + 8) c
                     -- the lock, row by row as candidates fit (the filter below is applied to
                     -- c, before the join): a row another transaction holds is skipped, and one
                     -- changed since is read as it is now. By its place in the heap: the row
                     -- was just read there
                     CROSS JOIN LATERAL (
                          SELECT q.ctid AS at, %3$s
                            FROM pgmq.%2$I q
                           WHERE q.ctid = c.at AND q.vt <= v_now
                             FOR UPDATE SKIP LOCKED) y
                     -- an exhausted job is archived whatever its key; a job fits while its key
                     -- has fewer than key_concurrency leased (a probe of the leased index that
                     -- stops at the key_concurrency-th entry)
                     WHERE c.exhausted OR c.k IS NULL
                        OR NOT EXISTS (
                               SELECT 1 FROM pgmq.%2$I l
                                WHERE drainpipe.job_key(l.message -> 'payload') = c.k
                                  AND l.read_ct > 0
                                  AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                                  AND l.vt > v_now
                               OFFSET v_flow.key_concurrency - 1)
                     LIMIT v_room
                ), leasing AS (
                    -- one job of a key per pass: the probe saw none of the pass's jobs leased,
                    -- so a second one of the key might not fit (the pick's passes take it after)
                    SELECT p.msg_id, p.at
                      FROM (SELECT p0.msg_id, p0.at, p0.k,
                                   row_number() OVER (PARTITION BY p0.k ORDER BY p0.vt, p0.msg_id) AS nth
                              FROM picked p0 WHERE NOT p0.exhausted) p
                     WHERE p.k IS NULL OR p.nth = 1
                %4$s
                GET DIAGNOSTICS v_taken = ROW_COUNT;
                IF v_taken >= v_room THEN
                    RETURN;
                END IF;
                -- short (held keys, a key twice, dead jobs or locked rows in the pass): the
                -- pick's passes for the rest of the room, which count this statement's leases
                v_room := v_room - v_taken;
            END IF;
            v_ids := drainpipe.%8$I(v_flow, v_room, v_now);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
            RETURN QUERY
            WITH picked AS (
                SELECT q.msg_id, %3$s
                  FROM pgmq.%2$I q
                 -- locked by the pick, so read as the pick left them
                 WHERE q.msg_id = ANY (v_ids) AND q.vt <= v_now
            %5$s
            -- the rate windows count the attempts just started
            IF v_flow.rate_count IS NOT NULL OR v_flow.key_rate_count IS NOT NULL THEN
                v_keys := ARRAY(SELECT drainpipe.job_key(m.message -> 'payload') FROM pgmq.%2$I m
                                 WHERE m.msg_id = ANY (v_ids) AND m.vt = v_until);
                PERFORM drainpipe.flow_record_claims(v_flow, v_keys, v_now);
            END IF;
        END
        $body$
        $fn$, 'flow_claim_jobs__' || p_queue, 'q_' || p_queue, drainpipe.pgmq_lease_cols(p_queue),
              drainpipe.pgmq_lease_sql(p_queue, 'm.ctid = ANY (ARRAY(SELECT l.at FROM leasing l))'),
              drainpipe.pgmq_lease_sql(p_queue, 'm.msg_id = ANY (ARRAY(SELECT p.msg_id FROM picked p WHERE NOT p.exhausted))'),
              p_queue, 'claim_jobs__' || p_queue, 'flow_pick_jobs__' || p_queue,
              $l$l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text) AND l.vt > v_now$l$);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(drainpipe.queue_flow, integer, timestamptz) FROM PUBLIC', 'flow_pick_jobs__' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'flow_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'flow_claim_jobs__' || p_queue);
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        -- a prioritised queue's limited pick goes along its levels
        PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_newest_window(p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamp with time zone, p_before_id bigint, p_now timestamp with time zone, p_after bigint, OUT low bigint, OUT top bigint, OUT ids bigint[])
 RETURNS record LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' SET enable_sort TO 'off' SET enable_seqscan TO 'off' SET jit TO 'off' SET enable_bitmapscan TO 'off' AS $function$
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
    -- every id of the queue with its stamp, live or archived
    v_both text := format('(SELECT msg_id AS id, enqueued_at AS at FROM pgmq.%I
                            UNION ALL SELECT msg_id, enqueued_at FROM pgmq.%I)', 'q_' || p_queue, 'a_' || p_queue);
BEGIN
    IF p_before_at IS NOT NULL THEN
        -- the newest id (above p_after) and its stamp
        EXECUTE format('SELECT u.id, u.at FROM %s u WHERE u.id > $1 ORDER BY u.id DESC LIMIT 1', v_both)
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
                           SELECT u.id, u.at FROM %s u WHERE u.id >= m.mid ORDER BY u.id LIMIT 1) f
                      WHERE s.lo < s.hi)
                 SELECT min(best) FROM s', v_both)
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
            EXECUTE format('SELECT max(l.at) FROM (SELECT u.at FROM %s u WHERE u.id >= $1 ORDER BY u.id LIMIT 16) l',
                           v_both)
              INTO v_bound USING v_last;
            EXIT WHEN (v_newest[v_limit]).at >= v_bound + v_window;
            v_chunk := 64 + v_limit / 4;  -- the page is found: only its last window is left
        ELSE
            v_chunk := least(v_chunk * 2, 100000);
        END IF;
    END LOOP;
    ids := ARRAY(SELECT x.id FROM unnest(v_newest) x);
END $function$;


CREATE OR REPLACE FUNCTION drainpipe.job_queue_overview_v1(p_queues text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(queue text, counts jsonb, ready bigint, oldest_ready_age_s double precision, paused boolean, series jsonb) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_from timestamptz := date_trunc('minute', v_now) - interval '59 minutes';
    v_queue text;
    v_live jsonb;
    v_done jsonb;
    v_enqueued jsonb;
    v_enqueued_done jsonb;
    v_succeeded jsonb;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        IF to_regclass('pgmq.a_' || v_queue) IS NULL THEN
            counts := jsonb_build_object('queued', 0, 'leased', 0, 'retry_wait', 0,
                                         'succeeded', 0, 'dead', 0, 'cancelled', 0);
            ready := 0;
            oldest_ready_age_s := NULL;
            series := drainpipe.overview_series(v_queue, v_now, '{}', '{}', '{}');
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- the live jobs in one pass: counts by state, the ready ones and the oldest of
        -- them, and those enqueued in the last hour by minute; a job never claimed is
        -- queued (and ready once visible) without reading its document
        EXECUTE format(
            'SELECT jsonb_build_object(''queued'', sum(g.queued), ''leased'', sum(g.leased),
                                       ''retry_wait'', sum(g.retry_wait), ''dead'', sum(g.dead)),
                    coalesce(sum(g.ready), 0),
                    extract(epoch FROM $1 - min(g.oldest))::double precision,
                    coalesce(jsonb_object_agg(extract(epoch FROM g.minute)::bigint::text, g.n)
                                 FILTER (WHERE g.minute IS NOT NULL), ''{}''::jsonb)
               FROM (SELECT CASE WHEN l.enqueued_at >= $2 THEN date_trunc(''minute'', l.enqueued_at) END AS minute,
                            count(*) AS n,
                            count(*) FILTER (WHERE l.state = ''queued'') AS queued,
                            count(*) FILTER (WHERE l.state = ''leased'') AS leased,
                            count(*) FILTER (WHERE l.state = ''retry_wait'') AS retry_wait,
                            count(*) FILTER (WHERE l.state = ''dead'') AS dead,
                            count(*) FILTER (WHERE l.ready) AS ready,
                            min(l.vt) FILTER (WHERE l.ready) AS oldest
                       FROM (SELECT q.vt, q.enqueued_at,
                                    CASE WHEN q.read_ct = 0 THEN ''queued''
                                         ELSE drainpipe.job_state_at(drainpipe.pgmq_live_state(q.read_ct, q.message), q.vt,
                                                  q.read_ct, coalesce((q.message ->> ''max_attempts'')::integer, 5), $1)
                                    END AS state,
                                    q.vt <= $1 AND CASE WHEN q.read_ct = 0 THEN true
                                                        ELSE q.read_ct < coalesce((q.message ->> ''max_attempts'')::integer, 5)
                                                   END AS ready
                               FROM pgmq.%I q) l
                      GROUP BY 1) g', 'q_' || v_queue)
          INTO v_live, ready, oldest_ready_age_s, v_enqueued USING v_now, v_from;
        -- the finished: the kept totals, or (a queue not kept yet) a count of the archive
        v_done := drainpipe.kept_job_totals(v_queue);
        IF v_done IS NULL THEN
            EXECUTE format(
                'SELECT coalesce(jsonb_object_agg(s.state, s.n), ''{}''::jsonb)
                   FROM (SELECT CASE WHEN a.message ? ''cancelled'' THEN ''cancelled''
                                     WHEN a.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END AS state,
                                count(*) AS n
                           FROM pgmq.%I a GROUP BY 1) s', 'a_' || v_queue)
              INTO v_done;
        END IF;
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', coalesce((v_done ->> 'succeeded')::bigint, 0),
            'dead', coalesce((v_done ->> 'dead')::bigint, 0) + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', coalesce((v_done ->> 'cancelled')::bigint, 0));
        -- the last hour's finished jobs by minute: enqueued, and succeeded
        EXECUTE format(
            'SELECT (SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), ''{}''::jsonb)
                       FROM (SELECT date_trunc(''minute'', a.enqueued_at) AS minute, count(*) AS n
                               FROM pgmq.%1$I a WHERE a.archived_at >= $1 AND a.enqueued_at >= $1 GROUP BY 1) e),
                    (SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), ''{}''::jsonb)
                       FROM (SELECT date_trunc(''minute'', a.archived_at) AS minute, count(*) AS n
                               FROM pgmq.%1$I a
                              WHERE a.archived_at >= $1 AND NOT a.message ? ''dead'' AND NOT a.message ? ''cancelled''
                              GROUP BY 1) s)', 'a_' || v_queue)
          INTO v_enqueued_done, v_succeeded USING v_from;
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_enqueued_done, v_succeeded);
        RETURN NEXT;
    END LOOP;
END $function$;

