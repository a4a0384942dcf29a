-- pgmq: what QueuePolicy() and a concurrency far from binding cost a claim (10_flow_budget.sql).
--
-- The lease trigger (jobs 0007) ran its function for every job claimed, to read the
-- queue's max_lease and compare: a plpgsql call with three SET clauses per row, about half
-- of what a policy without limits cost the processing of no-op jobs. Its WHEN clause now
-- holds the max_lease itself, so only a lease that may be too long calls the function,
-- which reads the policy as before (a bound older than the policy only calls it more).
-- ensure_queue_policy_v1 writes the bound with the policy (attach_queue_policy_v1).
--
-- A queue limited by a concurrency alone: its turn takes the room from the queue's budget
-- and claims as an unlimited queue does, from the connection's bound (jobs 0014). Through
-- the flow claim it paid that claim's own frame (a security definer with three SET
-- clauses, a second read of the limits) and claimed from the start of the vt index (the
-- flow claim passes its clock, and a claim given a clock starts from no bound). Other
-- limits, and a budget spent or closed, still go through the flow claim.

-- The lease trigger of p_queue's table, its WHEN bound at the queue's max_lease (a second
-- of slack, as the function's own check); rewritten only when the bound changed (the
-- trigger's argument says which one it holds), so an unchanged policy takes no lock.
CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_trigger(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_table regclass := to_regclass('pgmq.' || quote_ident('q_' || p_queue));
    v_max double precision;
BEGIN
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = p_queue;
    IF v_max IS NULL OR v_table IS NULL OR EXISTS (
           SELECT 1 FROM pg_trigger t
            WHERE t.tgrelid = v_table AND t.tgname = 'drainpipe_policy_lease'
              AND t.tgargs = convert_to(v_max::text, 'UTF8') || '\x00'::bytea) THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE OR REPLACE TRIGGER drainpipe_policy_lease BEFORE UPDATE OF vt ON %s
                      FOR EACH ROW WHEN (NEW.read_ct > OLD.read_ct
                                         AND NEW.vt > clock_timestamp() + make_interval(secs => %L::double precision + 1))
                      EXECUTE FUNCTION drainpipe.pgmq_queue_policy_lease(%L)',
                   v_table, v_max::text, v_max::text);
END
$$;
REVOKE ALL ON FUNCTION drainpipe.ensure_lease_trigger(text) FROM PUBLIC;

-- jobs 0007's, the lease trigger bound at the stored max_lease (ensure_lease_trigger).
CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    v_table regclass;
BEGIN
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    v_table := ('pgmq.' || quote_ident('q_' || p_queue))::regclass;
    -- no writer between the count and the triggers: the counter starts exact
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', v_table);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_policy_insert' AND tgrelid = v_table) THEN
        EXECUTE format('CREATE TRIGGER drainpipe_policy_insert AFTER INSERT ON %s
                          REFERENCING NEW TABLE AS added FOR EACH STATEMENT
                          EXECUTE FUNCTION drainpipe.pgmq_queue_policy_insert()', v_table);
    END IF;
    PERFORM drainpipe.ensure_lease_trigger(p_queue);
    EXECUTE format('INSERT INTO drainpipe.queue_pending (queue, live) SELECT $1, count(*) FROM %s
                    ON CONFLICT (queue) DO UPDATE SET live = excluded.live', v_table) USING p_queue;
END
$$;

-- Existing policy queues: their lease triggers bound.
DO $bound$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT p.queue FROM drainpipe.queue_policies p ORDER BY p.queue LOOP
        PERFORM drainpipe.ensure_lease_trigger(v_queue);
    END LOOP;
END
$bound$;

-- jobs 0015's turn, a concurrency alone claimed from the queue's budget (see the header).
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
            v_flow drainpipe.queue_flow;
            v_room integer;
            v_now timestamptz;
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
                -- limited (jobs 0015). A concurrency alone, far from binding: the room from
                -- the session's chunk (jobs 0023), else from the queue's budget (jobs 0022),
                -- and the unlimited claim
                v_room := drainpipe.flow_budget_spend(%4$L, greatest(p_batch, 1));
                IF v_room IS NULL THEN
                    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %4$L;
                    v_room := drainpipe.flow_budget_take(v_flow, greatest(p_batch, 1));
                END IF;
                IF v_room < 0 THEN
                    -- the budget ran out under the shared lock: counted, with every chunk
                    -- the epoch handed out as leased (claims in flight may spend them)
                    v_room := 0;
                    IF drainpipe.flow_budget_pending(%4$L) >= 0 THEN
                        IF v_flow.queue IS NULL THEN
                            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %4$L;
                        END IF;
                        v_now := coalesce(p_now, clock_timestamp());
                        v_room := drainpipe.flow_room(v_flow, greatest(p_batch, 1),
                            drainpipe.flow_budget_pending(%4$L) + (
                                SELECT count(*) FROM pgmq.%6$I l
                                 WHERE l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text)
                                   AND l.vt > v_now),
                            v_now);
                    END IF;
                    IF v_room = 0 THEN
                        RETURN;
                    END IF;
                END IF;
                IF v_room > 0 THEN
                    RETURN QUERY
                    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                           c.last_error, false
                      FROM drainpipe.%3$I(p_lease, v_room, p_now) AS c;
                    RETURN;
                END IF;
                -- other limits, or no budget to take: the flow claim, defined with the
                -- limits (plpgsql resolves the name when this branch first runs)
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
              'claim_jobs__' || p_queue, p_queue, 'flow_claim_jobs__' || p_queue, 'q_' || p_queue);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) FROM PUBLIC',
                   'complete_and_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(bigint[], integer[], double precision, integer, timestamptz) TO service_role',
                       'complete_and_claim_jobs__' || p_queue);
    END IF;
END
$define$;

-- Existing queues' turn functions, regenerated with the budget's branch.
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

-- jobs 0015's claim, a limited queue's claim through its turn (no completions): a
-- concurrency alone is claimed from the session's chunk there, the other limits by the
-- flow claim as before.
CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(
    p_queue text, p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1,
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
        -- limited: the turn's claim (jobs 0023), which picks what the limits allow
        IF to_regproc('drainpipe.complete_and_claim_jobs__' || p_queue) IS NULL THEN
            PERFORM drainpipe.define_job_turn_function_v1(p_queue);
        END IF;
        RETURN QUERY EXECUTE format(
            'SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,'
            ' c.last_error FROM drainpipe.%I($1, $2, $3, $4, $5) c', 'complete_and_claim_jobs__' || p_queue)
          USING '{}'::bigint[], '{}'::integer[], p_lease, p_batch, p_now;
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
