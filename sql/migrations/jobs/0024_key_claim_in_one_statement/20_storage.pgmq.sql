-- pgmq: a claim past held keys stays flat (issue 38). Until now a queue with per-key limits
-- claimed in two statements: its pick (flow_pick_jobs__<queue>, a plpgsql loop of passes,
-- each one statement that probes each candidate's key and locks the ones that fit) and then
-- the lease of the ids it returned, read again by id. Here, on a queue limited by
-- key_concurrency (with or without concurrency; no rate, not ordered, no priorities), the
-- pick's first pass and the lease are one statement: it reads the ready jobs in vt order as
-- the unlimited claim does, probes each candidate's key (the leased index, up to the
-- key_concurrency-th entry), locks the ones that fit as it reaches them (by their place in
-- the heap, just read), stops at the claim's room and leases them. The probe does not see
-- the pass's own picks, so the pass leases one job of a key; another one it picked stays
-- queued (locked until the transaction ends, as the pick's rows over a key's limit are).
-- A pass that comes back short leaves the rest of the room to the pick's passes, as before,
-- which count the leases it made. Other limited queues claim as before.
--
-- ensure_flow_indexes is not restated: other migrations change its other parts. This
-- rewrites, in its current definition, only the per-key path of the flow claim it
-- generates, and fails loudly when that path is not there as written.
DO $patch$
DECLARE
    v_def text := pg_get_functiondef('drainpipe.ensure_flow_indexes(text)'::regprocedure);
    v_old_declare text := $old$
            v_leased bigint := 0;
            v_beside integer;
        BEGIN
            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %6$L;
$old$;
    v_new_declare text := $new$
            v_leased bigint := 0;
            v_beside integer;
            v_taken bigint;
        BEGIN
            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %6$L;
$new$;
    v_old_pick text := $old$
            v_ids := drainpipe.%10$I(v_flow, greatest(p_batch, 1), v_now);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
$old$;
    v_new_pick text := $new$
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
                    SELECT count(*) INTO v_leased FROM pgmq.%2$I l
                     WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                       AND l.vt > v_now;
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
                          SELECT q.ctid AS at, q.read_ct, q.vt, %4$s AS started_at,
                                 q.read_ct >= coalesce((q.message ->> 'max_attempts')::integer, 5) AS exhausted,
                                 q.read_ct > 0 AND q.message ->> 'failed' IS DISTINCT FROM q.read_ct::text AS lapsed
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
                ), expired AS (
                    -- a lease found run out ended then, whether the job is leased again now
                    -- or stays queued behind another job of its key
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
                -- by place too: locked by this statement, so where the lock found them (a row
                -- changed after the statement's snapshot is not updated here: the passes
                -- below take it)
                UPDATE pgmq.%2$I m
                   SET vt = v_until,
                       read_ct = m.read_ct + 1%5$s
                 WHERE m.ctid = ANY (ARRAY(SELECT l.at FROM leasing l))
                RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message -> 'payload',
                          coalesce((m.message ->> 'max_attempts')::integer, 5), m.message ->> 'last_error';
                GET DIAGNOSTICS v_taken = ROW_COUNT;
                IF v_taken >= v_room THEN
                    RETURN;
                END IF;
                -- short (held keys, a key twice, dead jobs or locked rows in the pass): the
                -- pick's passes for the rest of the room, which count this statement's leases
                v_room := v_room - v_taken;
            END IF;
            v_ids := drainpipe.%10$I(v_flow, v_room, v_now);
            IF cardinality(v_ids) = 0 THEN
                RETURN;
            END IF;
$new$;
BEGIN
    IF (length(v_def) - length(replace(v_def, v_old_declare, ''))) <> length(v_old_declare) THEN
        RAISE EXCEPTION 'key_claim_in_one_statement: ensure_flow_indexes does not hold the flow claim''s declarations of jobs 0021 once';
    END IF;
    IF (length(v_def) - length(replace(v_def, v_old_pick, ''))) <> length(v_old_pick) THEN
        RAISE EXCEPTION 'key_claim_in_one_statement: ensure_flow_indexes does not hold the flow claim''s pick of jobs 0021 once';
    END IF;
    EXECUTE replace(replace(v_def, v_old_declare, v_new_declare), v_old_pick, v_new_pick);
END
$patch$;

-- Existing limited queues: their flow claim generated again.
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
