-- pgmq: each queue's claim (define_job_queue_functions_v1's claim_jobs__<queue>, which
-- claim_jobs_v1 and the queue's turn function call) picks from this connection's bound for
-- the queue (10_claim_bound.sql): one more condition on pgmq's vt index (vt >= v_from), and
-- the bound CTE keeps the oldest vt picked as the next bound. A claim that comes up short
-- above the bound claims the rest below it (v_below), from the index's start. Lease, batch,
-- results and every other statement are those of jobs 0006; existing queues get the new
-- functions below.

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
END
$define$;

-- Existing queues: regenerate their claim and complete functions with the bound.
DO $regenerate$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$' LOOP
        IF to_regclass('pgmq.q_' || v_queue) IS NOT NULL AND to_regclass('pgmq.a_' || v_queue) IS NOT NULL THEN
            PERFORM drainpipe.define_job_queue_functions_v1(v_queue);
        END IF;
    END LOOP;
END
$regenerate$;
