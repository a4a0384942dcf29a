-- A flat pgmq claim (issue 19, item 5): the claim reads the vt index from its start
-- instead of walking msg_id order and filtering on vt, so 53,000 jobs leased or backing off
-- ahead of the ready ones no longer cost a claim 29 ms (0.8 ms without them). Only the
-- picking statement of the generated per-queue claim changes; signatures, results and every
-- other statement are 0002's. Existing queues get the new functions below.

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
                     -- the vt index read from its start: only visible rows are visited, so jobs
                     -- leased or backing off ahead of the ready ones cost nothing (in msg_id
                     -- order every one of them was read and filtered out). Visible first by
                     -- visibility time, as on the table backend; for jobs enqueued and never
                     -- claimed that is their enqueue order.
                     WHERE q.vt <= v_now
                     ORDER BY q.vt
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

-- Existing queues: regenerate their claim and complete functions with the new pick.
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
