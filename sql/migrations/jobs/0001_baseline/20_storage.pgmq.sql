-- drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules.
-- This part: the pgmq storage (a pgmq queue per queue, functions made per queue).
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.pgmq_list_before (
    queue text NOT NULL,
    last_id bigint NOT NULL,
    CONSTRAINT pgmq_list_before_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.pgmq_list_before ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'on' SET jit TO 'off' AS $function$
DECLARE
    v_table regclass := to_regclass('pgmq.' || quote_ident('q_' || p_queue));
BEGIN
    IF v_table IS NOT NULL AND NOT drainpipe.pgmq_lease_bound_current(p_queue, v_table) THEN
        -- a new lease bound is an ALTER TABLE (ensure_lease_bound): its lock first, before
        -- the weaker ones below take theirs. Asked for after them, it would wait for a claim
        -- that has read the table while that claim's write waits for them, and Postgres
        -- fails the claim with a deadlock at once
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_table);
    END IF;
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    v_table := ('pgmq.' || quote_ident('q_' || p_queue))::regclass;
    -- no writer between the count and the triggers: the counter starts exact
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', v_table);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_policy_insert' AND tgrelid = v_table) THEN
        EXECUTE format('CREATE TRIGGER drainpipe_policy_insert AFTER INSERT ON %s
                          REFERENCING NEW TABLE AS added FOR EACH STATEMENT
                          EXECUTE FUNCTION drainpipe.pgmq_queue_policy_insert()', v_table);
    END IF;
    PERFORM drainpipe.ensure_lease_bound(p_queue);
    EXECUTE format('INSERT INTO drainpipe.queue_pending (queue, live) SELECT $1, count(*) FROM %s
                    ON CONFLICT (queue) DO UPDATE SET live = excluded.live', v_table) USING p_queue;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.child_job_states(p_queue text, p_ids bigint[])
 RETURNS TABLE(id bigint, state text, last_code text) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN QUERY SELECT i.id, 'purged'::text, NULL::text FROM unnest(p_ids) AS i(id);
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT i.id,
                CASE WHEN q.msg_id IS NOT NULL THEN ''live''
                     WHEN a.msg_id IS NULL THEN ''purged''
                     WHEN a.message ? ''cancelled'' THEN ''cancelled''
                     WHEN a.message ? ''dead'' THEN ''dead''
                     ELSE ''succeeded'' END,
                CASE WHEN q.msg_id IS NOT NULL OR a.msg_id IS NULL THEN NULL
                     WHEN a.message ? ''cancelled'' OR a.message ? ''dead'' THEN a.message ->> ''last_code''
                     ELSE a.message ->> ''skipped'' END
           FROM unnest($1) WITH ORDINALITY AS i(id, n)
           LEFT JOIN pgmq.%I q ON q.msg_id = i.id
           LEFT JOIN pgmq.%I a ON a.msg_id = i.id
          ORDER BY i.n', 'q_' || p_queue, 'a_' || p_queue)
      USING p_ids;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(p_queue text, p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_row_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_room integer;
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = p_queue) THEN
        RETURN;  -- paused: nothing is handed out
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue) THEN
        -- limited: as the turn claims (define_job_turn_function_v1), called directly (a
        -- claim of a queue with key limits is about a tenth faster than through the turn).
        -- A chunk to spend was taken by the flow claim, which the unlimited claim serves
        IF current_setting('drainpipe.flow_budget.' || p_queue, true) <> '' THEN
            v_room := drainpipe.flow_budget_spend(p_queue, greatest(p_batch, 1));
            IF v_room IS NOT NULL THEN
                RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'claim_jobs__' || p_queue)
                  USING p_lease, v_room, p_now;
                RETURN;
            END IF;
        END IF;
        IF to_regproc('drainpipe.flow_claim_jobs__' || p_queue) IS NULL THEN
            PERFORM drainpipe.ensure_flow_indexes(p_queue);
        END IF;
        RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'flow_claim_jobs__' || p_queue)
          USING p_lease, p_batch, p_now;
        RETURN;
    END IF;
    -- the queue's own functions, by name: a queue first seen here gets them
    IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3)', 'claim_jobs__' || p_queue)
      USING p_lease, p_batch, p_now;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_and_claim_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_turn_row_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    -- the queue's own turn function, by name, as claim_jobs_v1 looks its claim up
    IF to_regproc('drainpipe.complete_and_claim_jobs__' || p_queue) IS NULL THEN
        IF to_regproc('drainpipe.claim_jobs__' || p_queue) IS NULL THEN
            PERFORM drainpipe.ensure_job_queue_v1(p_queue);
        END IF;
        PERFORM drainpipe.define_job_turn_function_v1(p_queue);
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM drainpipe.%I($1, $2, $3, $4, $5)',
                                'complete_and_claim_jobs__' || p_queue)
      USING p_ids, p_attempts, p_lease, p_batch, p_now;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.count_live_jobs(p_queue text, p_limit bigint)
 RETURNS bigint LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_count bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmq.%I LIMIT $1) x', 'q_' || p_queue)
      INTO v_count USING p_limit;
    RETURN v_count;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
 RETURNS SETOF bigint LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.debounce_job(p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_changed integer;
BEGIN
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        RETURN false;
    END IF;
    IF p_payload ? 'priority' THEN
        -- the new payload's priority is a level the claim reads (queue_priorities)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    EXECUTE format('UPDATE pgmq.%I m
                       SET message = jsonb_set(m.message, ''{payload}'', coalesce($1, ''{}''::jsonb)),
                           vt = clock_timestamp() + make_interval(secs => greatest($2, 0))
                     WHERE m.msg_id = $3 AND m.read_ct = 0', 'q_' || p_queue)
      USING p_payload, p_seconds, p_id;
    GET DIAGNOSTICS v_changed = ROW_COUNT;
    RETURN v_changed > 0;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.define_job_priority_claim_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    PERFORM drainpipe.pgmq_ensure_index('q_' || p_queue || '_dp_priority', 'q_' || p_queue,
        '(drainpipe.job_priority(message -> ''payload''), vt, msg_id)');
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
    -- the limited pick along the levels, which the queue's flow claim calls
    PERFORM drainpipe.pgmq_define_flow_pick(p_queue, true);
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

CREATE OR REPLACE FUNCTION drainpipe.define_job_turn_function_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
            v_room integer;
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
                -- limited. A concurrency alone, far from binding: the room from the session's
                -- chunk (an expression, no call) and the unlimited claim; else the flow claim,
                -- which takes a chunk, counts, or picks what the limits allow (plpgsql
                -- resolves its name when this branch first runs)
                v_room := drainpipe.flow_budget_spend(%4$L, greatest(p_batch, 1));
                IF v_room IS NOT NULL THEN
                    RETURN QUERY
                    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts,
                           c.last_error, false
                      FROM drainpipe.%3$I(p_lease, v_room, p_now) AS c;
                    RETURN;
                END IF;
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.delete_finished_jobs(p_queue text, p_before timestamp with time zone, p_dead_before timestamp with time zone, p_batch integer)
 RETURNS bigint[] LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_ids bigint[] := '{}';
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NOT NULL THEN
        EXECUTE format(
            'WITH gone AS (
                 DELETE FROM pgmq.%1$I a WHERE a.msg_id = ANY (ARRAY(
                     SELECT x.msg_id FROM pgmq.%1$I x
                      WHERE x.archived_at < greatest($1, $2)
                        AND x.archived_at < CASE WHEN x.message ? ''dead'' THEN $2 ELSE $1 END
                      ORDER BY x.msg_id LIMIT $3))
                 RETURNING a.msg_id),
             attempts_gone AS (
                 DELETE FROM drainpipe.job_attempts t USING gone g WHERE t.queue = $4 AND t.job_id = g.msg_id)
             SELECT coalesce(array_agg(msg_id), ''{}'') FROM gone', 'a_' || p_queue)
          INTO v_ids USING p_before, p_dead_before, greatest(coalesce(p_batch, 10000), 1), p_queue;
    END IF;
    RETURN v_ids;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job_v1(p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5, p_dedupe_key text DEFAULT NULL::text, p_dedupe_running boolean DEFAULT true)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs_v1(p_queue text, p_payloads jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    -- the window a policy queue's count reads (its table's check constraint holds every
    -- lease to max_lease, pgmq's own functions' too)
    PERFORM drainpipe.keep_flow_lease_window(p_queue, format(
        'SELECT max(l.vt) FROM (SELECT l.vt FROM pgmq.%I l
          WHERE l.vt > $1 AND l.read_ct > 0 AND (l.message ->> ''failed'') IS DISTINCT FROM (l.read_ct::text)
          ORDER BY l.vt DESC LIMIT 1) l', 'q_' || p_queue));
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f
                WHERE f.queue = p_queue AND drainpipe.flow_budget_applies(f) AND f.lease_window IS NOT NULL) THEN
        -- a queue-wide concurrency only, on a policy queue: the exact counts read pgmq's own
        -- vt index over the window, and a lease enters no index of ours
        EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'q_' || p_queue || '_dp_flow_leased_vt');
    ELSIF EXISTS (SELECT 1 FROM drainpipe.queue_flow f
                   WHERE f.queue = p_queue AND drainpipe.flow_budget_applies(f)) THEN
        -- a queue-wide concurrency only, no lease bound: what is leased by vt alone, for the
        -- exact counts; a lease then evaluates no key for an index
        PERFORM drainpipe.pgmq_ensure_index('q_' || p_queue || '_dp_flow_leased_vt', 'q_' || p_queue,
            '(vt) WHERE read_ct > 0 AND (message ->> ''failed'') IS DISTINCT FROM (read_ct::text)');
    ELSE
        -- what is leased (claimed, not failed; a lapsed lease reads vt <= now), per key:
        -- concurrency and key_concurrency count here, bounded by the limits
        PERFORM drainpipe.pgmq_ensure_index('q_' || p_queue || '_dp_flow_leased', 'q_' || p_queue,
            '(drainpipe.job_key(message -> ''payload''), vt) WHERE read_ct > 0 AND (message ->> ''failed'') IS DISTINCT FROM (read_ct::text)');
    END IF;
    -- a key's jobs in enqueue order (every row of the queue table is live): ordered=True only
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        PERFORM drainpipe.pgmq_ensure_index('q_' || p_queue || '_dp_flow_order', 'q_' || p_queue,
            '(drainpipe.job_key(message -> ''payload''), msg_id) WHERE drainpipe.job_key(message -> ''payload'') IS NOT NULL');
    END IF;
    PERFORM drainpipe.pgmq_define_flow_pick(p_queue, false);
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
            v_upto timestamptz;
        BEGIN
            SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = %6$L;
            IF v_flow.queue IS NULL THEN
                -- the limits were dropped since the caller looked
                RETURN QUERY SELECT * FROM drainpipe.%7$I(p_lease, p_batch, p_now);
                RETURN;
            END IF;
            v_upto := drainpipe.flow_lease_upto(v_flow, v_now);  -- where the counts stop
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
              $l$l.read_ct > 0 AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text) AND l.vt > v_now AND l.vt <= v_upto$l$);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) FROM PUBLIC', 'flow_claim_jobs__' || p_queue);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION drainpipe.%I(double precision, integer, timestamptz) TO service_role', 'flow_claim_jobs__' || p_queue);
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        -- a prioritised queue's limited pick goes along its levels
        PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_job_queue_v1(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue:' || p_queue));
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        PERFORM pgmq.create(p_queue);
    END IF;
    PERFORM drainpipe.pgmq_ensure_index('q_' || p_queue || '_dedupe_idx', 'q_' || p_queue,
        '((message ->> ''dedupe_key'')) WHERE message ? ''dedupe_key''');
    -- dead jobs not replayed yet, newest first (list_dead, retry_dead, stats)
    PERFORM drainpipe.pgmq_ensure_index('a_' || p_queue || '_unreplayed_idx', 'a_' || p_queue,
        '(msg_id) WHERE message ? ''dead'' AND NOT message ? ''replayed_by''');
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'a_' || p_queue || '_dead_idx');
    PERFORM drainpipe.pgmq_list_by_ids(p_queue);
    IF to_regprocedure('drainpipe.claim_jobs__' || p_queue || '(double precision, integer, timestamptz)') IS NULL
       OR to_regprocedure('drainpipe.complete_jobs__' || p_queue || '(bigint[], integer[], timestamptz)') IS NULL THEN
        PERFORM drainpipe.define_job_queue_functions_v1(p_queue);
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_bound(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_table regclass := to_regclass('pgmq.' || quote_ident('q_' || p_queue));
    v_max double precision;
BEGIN
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = p_queue;
    -- no table yet (its creation comes back here), or the bound is current (none included:
    -- an ALTER TABLE locks the table even when it finds nothing to drop)
    IF v_table IS NULL OR drainpipe.pgmq_lease_bound_current(p_queue, v_table) THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS drainpipe_policy_lease', v_table);
    IF v_max IS NULL THEN
        RETURN;
    END IF;
    -- Every writer of the queue's table, pgmq's own functions included, holds a lease to
    -- max_lease: a row read at least once, not failed (a retry's backoff or a suspension is
    -- not a lease), may not be visible again later than max_lease (+1 s) from now. A check
    -- reads only the new row: a row trigger fetched and locked every row a claim leased.
    -- Its last term runs only for a row over the bound, to refuse it with DPQ03. NOT VALID:
    -- a lease granted under an earlier, longer bound runs out as granted.
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT drainpipe_policy_lease CHECK (
                      read_ct = 0
                      OR vt <= clock_timestamp() + %L::interval
                      OR (message ->> ''failed'') IS NOT DISTINCT FROM read_ct::text
                      OR drainpipe.pgmq_lease_refused(%L, vt, %L)) NOT VALID',
                   v_table, make_interval(secs => v_max + 1)::text, p_queue, v_max);
    EXECUTE format('COMMENT ON CONSTRAINT drainpipe_policy_lease ON %s IS %L', v_table, v_max::text);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_priority_claim(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    END IF;
    PERFORM drainpipe.define_job_priority_claim_v1(p_queue);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_overview_v1(p_queues text[], p_force boolean DEFAULT false)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_queue text;
    v_table regclass;
    v_total bigint := 0;
    v_counted bigint;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        CONTINUE WHEN to_regclass('pgmq.a_' || v_queue) IS NULL;
        CONTINUE WHEN NOT p_force AND EXISTS (SELECT 1 FROM drainpipe.job_totals_kept k WHERE k.queue = v_queue);
        v_table := ('pgmq.' || quote_ident('a_' || v_queue))::regclass;
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', v_table);
        DELETE FROM drainpipe.job_totals WHERE queue = v_queue;
        EXECUTE format(
            'INSERT INTO drainpipe.job_totals (queue, state, shard, n)
             SELECT $1, CASE WHEN a.message ? ''cancelled'' THEN ''cancelled''
                             WHEN a.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END, 0, count(*)
               FROM %s a GROUP BY 2', v_table) USING v_queue;
        SELECT coalesce(sum(n), 0) INTO v_counted FROM drainpipe.job_totals WHERE queue = v_queue;
        v_total := v_total + v_counted;
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_totals_insert' AND tgrelid = v_table) THEN
            EXECUTE format('CREATE TRIGGER drainpipe_totals_insert AFTER INSERT ON %s
                              REFERENCING NEW TABLE AS added FOR EACH STATEMENT
                              EXECUTE FUNCTION drainpipe.pgmq_job_totals()', v_table);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_totals_delete' AND tgrelid = v_table) THEN
            EXECUTE format('CREATE TRIGGER drainpipe_totals_delete AFTER DELETE ON %s
                              REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
                              EXECUTE FUNCTION drainpipe.pgmq_job_totals()', v_table);
        END IF;
        INSERT INTO drainpipe.job_totals_kept (queue) VALUES (v_queue) ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN v_total;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(p_queue text, p_id bigint, p_attempt integer, p_error text, p_retry_in double precision DEFAULT NULL::double precision, p_code text DEFAULT NULL::text, p_discard boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.finished_jobs_by_minute(p_queue text, p_from timestamp with time zone)
 RETURNS TABLE(totals jsonb, enqueued jsonb, succeeded jsonb) LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN QUERY SELECT '{}'::jsonb, '{}'::jsonb, '{}'::jsonb;
        RETURN;
    END IF;
    -- job_queue_overview_v1's finished jobs: the kept totals, or (a queue not kept yet) a
    -- count of the archive; and those archived since p_from by minute, enqueued and succeeded
    totals := drainpipe.kept_job_totals(p_queue);
    IF totals IS NULL THEN
        EXECUTE format(
            'SELECT coalesce(jsonb_object_agg(s.state, s.n), ''{}''::jsonb)
               FROM (SELECT CASE WHEN a.message ? ''cancelled'' THEN ''cancelled''
                                 WHEN a.message ? ''dead'' THEN ''dead'' ELSE ''succeeded'' END AS state,
                            count(*) AS n
                       FROM pgmq.%I a GROUP BY 1) s', 'a_' || p_queue)
          INTO totals;
    END IF;
    EXECUTE format(
        'SELECT (SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), ''{}''::jsonb)
                   FROM (SELECT date_trunc(''minute'', a.enqueued_at) AS minute, count(*) AS n
                           FROM pgmq.%1$I a WHERE a.archived_at >= $1 AND a.enqueued_at >= $1 GROUP BY 1) e),
                (SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), ''{}''::jsonb)
                   FROM (SELECT date_trunc(''minute'', a.archived_at) AS minute, count(*) AS n
                           FROM pgmq.%1$I a
                          WHERE a.archived_at >= $1 AND NOT a.message ? ''dead'' AND NOT a.message ? ''cancelled''
                          GROUP BY 1) s)', 'a_' || p_queue)
      INTO enqueued, succeeded USING p_from;
    RETURN NEXT;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.hold_job_fence(p_queue text, p_id bigint, p_attempt integer)
 RETURNS timestamp with time zone LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_enqueued timestamptz;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT enqueued_at FROM pgmq.%I WHERE msg_id = $1 AND read_ct = $2
                       AND message ->> ''failed'' IS DISTINCT FROM read_ct::text FOR UPDATE',
                   'q_' || p_queue)
      INTO v_enqueued USING p_id, p_attempt;
    RETURN v_enqueued;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamp with time zone)
 RETURNS TABLE(id bigint, held_by text) LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_table text := 'q_' || p_flow.queue;
    v_keyed boolean := p_flow.ordered OR p_flow.key_concurrency IS NOT NULL
                       OR p_flow.key_rate_count IS NOT NULL;
    v_leased bigint;
    v_claims bigint;
BEGIN
    IF to_regclass('pgmq.' || quote_ident(v_table)) IS NULL THEN
        RETURN;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        EXECUTE format('SELECT count(*) FROM pgmq.%I l
                         WHERE l.read_ct > 0 AND l.vt > $1
                           AND (l.message ->> ''failed'') IS DISTINCT FROM (l.read_ct::text)',
                       v_table)
           INTO v_leased USING p_now;
    END IF;
    IF p_flow.rate_count IS NOT NULL THEN
        SELECT count(*) INTO v_claims FROM drainpipe.flow_claims c
         WHERE c.queue = p_flow.queue
           AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per);
    END IF;
    -- the due jobs (p_ids: those of them only), then each of their keys' counts (see the
    -- table's)
    RETURN QUERY EXECUTE format($q$
        WITH due AS MATERIALIZED (
            SELECT j.msg_id AS id,
                   CASE WHEN $4 THEN drainpipe.job_key(j.message -> 'payload') END AS key
              FROM pgmq.%1$I j
             WHERE j.vt <= $2
               AND j.read_ct < coalesce((j.message ->> 'max_attempts')::integer, 5)
               %2$s
        ),
        keys AS (
            SELECT k.key,
                   CASE WHEN ($3).ordered THEN (
                       SELECT min(e.msg_id) FROM pgmq.%1$I e
                        WHERE drainpipe.job_key(e.message -> 'payload') = k.key
                          AND drainpipe.job_key(e.message -> 'payload') IS NOT NULL)
                   END AS first_id,
                   CASE WHEN ($3).key_concurrency IS NOT NULL THEN (
                       SELECT count(*) FROM pgmq.%1$I l
                        WHERE drainpipe.job_key(l.message -> 'payload') = k.key
                          AND l.read_ct > 0 AND l.vt > $2
                          AND (l.message ->> 'failed') IS DISTINCT FROM (l.read_ct::text))
                   END AS leased,
                   CASE WHEN ($3).key_rate_count IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.flow_claims c
                        WHERE c.queue = ($3).queue AND c.key = k.key
                          AND c.claimed_at > $2 - make_interval(secs => ($3).key_rate_per))
                   END AS claims
              FROM (SELECT DISTINCT d.key FROM due d WHERE d.key IS NOT NULL) k
        )
        SELECT h.id, h.held_by FROM (
            SELECT d.id, CASE
                       WHEN k.first_id < d.id THEN 'order'
                       WHEN $5 >= ($3).concurrency OR k.leased >= ($3).key_concurrency
                           THEN 'concurrency'
                       WHEN $6 >= ($3).rate_count OR k.claims >= ($3).key_rate_count
                           THEN 'rate'
                   END AS held_by
              FROM due d LEFT JOIN keys k ON k.key = d.key
        ) h
        WHERE h.held_by IS NOT NULL
    $q$, v_table, CASE WHEN p_ids IS NOT NULL THEN 'AND j.msg_id = ANY ($1)' END)
    USING p_ids, p_now, p_flow, v_keyed, v_leased, v_claims;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_due(p_queue text, p_now timestamp with time zone)
 RETURNS bigint LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_due bigint;
BEGIN
    IF to_regclass('pgmq.' || quote_ident('q_' || p_queue)) IS NULL THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM pgmq.%I j
                     WHERE j.vt <= $1
                       AND j.read_ct < coalesce((j.message ->> ''max_attempts'')::integer, 5)',
                   'q_' || p_queue)
       INTO v_due USING p_now;
    RETURN v_due;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v2 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL::bigint)
 RETURNS SETOF drainpipe.dead_job_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.live_job_payloads_v1(p_queue text, p_after bigint, p_limit integer)
 RETURNS TABLE(id bigint, payload jsonb) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT msg_id, message -> ''payload'' FROM pgmq.%I WHERE msg_id > $1 ORDER BY msg_id LIMIT $2',
        'q_' || p_queue) USING coalesce(p_after, 0), least(greatest(coalesce(p_limit, 100), 1), 1000);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.live_jobs_by_minute(p_queue text, p_now timestamp with time zone, p_from timestamp with time zone)
 RETURNS TABLE(minute timestamp with time zone, n bigint, queued bigint, leased bigint, retry_wait bigint, dead bigint, ready bigint, oldest timestamp with time zone) LANGUAGE plpgsql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    -- job_queue_overview_v1's live jobs in one pass, by minute enqueued since p_from
    -- (before it: NULL); a job never claimed is queued (and ready once visible) without
    -- reading its document
    RETURN QUERY EXECUTE format(
        'SELECT CASE WHEN l.enqueued_at >= $2 THEN date_trunc(''minute'', l.enqueued_at) END,
                count(*),
                count(*) FILTER (WHERE l.state = ''queued''),
                count(*) FILTER (WHERE l.state = ''leased''),
                count(*) FILTER (WHERE l.state = ''retry_wait''),
                count(*) FILTER (WHERE l.state = ''dead''),
                count(*) FILTER (WHERE l.ready),
                min(l.vt) FILTER (WHERE l.ready)
           FROM (SELECT q.vt, q.enqueued_at,
                        CASE WHEN q.read_ct = 0 THEN ''queued''
                             ELSE drainpipe.job_state_at(drainpipe.pgmq_live_state(q.read_ct, q.message), q.vt,
                                      q.read_ct, coalesce((q.message ->> ''max_attempts'')::integer, 5), $1)
                        END AS state,
                        q.vt <= $1 AND CASE WHEN q.read_ct = 0 THEN true
                                            ELSE q.read_ct < coalesce((q.message ->> ''max_attempts'')::integer, 5)
                                       END AS ready
                   FROM pgmq.%I q) l
          GROUP BY 1', 'q_' || p_queue)
      USING p_now, p_from;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.park_job(p_queue text, p_id bigint, p_until timestamp with time zone, p_waiting_for text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    EXECUTE format(
        'UPDATE pgmq.%I SET vt = $2,
                message = (message - ''waiting_for'')
                          || jsonb_build_object(''failed'', read_ct, ''suspended'', read_ct,
                                                ''max_attempts'', coalesce((message ->> ''max_attempts'')::integer, 5) + 1)
                          || CASE WHEN $3 IS NULL THEN ''{}''::jsonb ELSE jsonb_build_object(''waiting_for'', $3) END
          WHERE msg_id = $1', 'q_' || p_queue)
      USING p_id, p_until, p_waiting_for;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_archive_job(p_queue text, p_id bigint, p_marks jsonb, p_at timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_define_flow_pick(p_queue text, p_levels boolean)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- The pick of a queue's flow claim (ensure_flow_indexes), as the table storage's
    -- job_messages_flow_take: passes in vt order, as the unlimited claim reads, each probing
    -- its candidates' keys and locking the ones that fit as it reaches them. A pass starts at
    -- the last vt read, leaving out the rows of that vt already taken or passed (pgmq stamps
    -- a batch with one vt). A job whose last lease ran out is let through without counting:
    -- the claim archives it dead instead of leasing it. With priorities (p_levels,
    -- define_job_priority_claim_v1) each pass goes over one level's range of the priority
    -- index in (vt, msg_id) order, highest level first.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION drainpipe.%1$I(
            p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
        )
        RETURNS bigint[]
        -- runs under the settings of its only caller, the flow claim (a SET clause costs
        -- every call a save and restore)
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
            v_rows integer;
            v_r record;
            v_taken bigint;
            %5$s
        BEGIN
            %6$s
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
                %4$s
                EXIT WHEN v_room = 0;
                v_scanned := v_scanned + v_chunk;
                IF v_rows < v_limit THEN
                    -- a short pass read its whole chunk: where did the chunk end?
                    %7$s
                END IF;
                %8$s
                EXIT WHEN v_scanned >= v_bound;
                v_chunk := least(v_chunk, v_bound - v_scanned);
            END LOOP;
            RETURN v_ids;
        END
        $body$
        $fn$, 'flow_pick_jobs__' || p_queue, 'q_' || p_queue, p_queue,
        CASE WHEN p_levels THEN drainpipe.pgmq_flow_pick_sql(p_queue, $r$
                -- the level's range after the last place read, as row comparisons: only
                -- the priority index serves them
                WHERE (drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id) > (v_level, v_after_at, v_after_id)
                  AND (drainpipe.job_priority(q.message -> 'payload'), q.vt) <= (v_level, p_now)
                ORDER BY drainpipe.job_priority(q.message -> 'payload'), q.vt, q.msg_id$r$,
            'v_last_at := v_r.vt; v_last_id := v_r.id;')
        ELSE 'v_last := NULL;
                ' || drainpipe.pgmq_flow_pick_sql(p_queue,
            $r$WHERE q.vt <= p_now AND q.vt >= v_after AND NOT (q.msg_id = ANY (v_tied)) ORDER BY q.vt$r$,
            'IF v_r.vt = v_last THEN v_last_ids := v_last_ids || v_r.id;
             ELSE v_last := v_r.vt; v_last_ids := ARRAY[v_r.id]; END IF;') END,
        -- the variables of the place a pass starts at
        CASE WHEN p_levels THEN $d$
            v_after_at timestamptz := '-infinity';
            v_after_id bigint := 0;
            v_levels integer[];
            v_level integer;
            v_last_at timestamptz;
            v_last_id bigint;$d$
        ELSE $d$
            v_after timestamptz := '-infinity';
            v_tied bigint[] := '{}';
            v_last timestamptz;
            v_last_ids bigint[];$d$ END,
        CASE WHEN p_levels THEN format($i$
            SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = %L;
            v_levels := coalesce(v_levels, '{0}');
            v_level := v_levels[1];$i$, p_queue) END,
        -- where the chunk ended; then on from there
        CASE WHEN p_levels THEN format($e$
                    v_last_at := NULL;
                    SELECT q.vt, q.msg_id INTO v_last_at, v_last_id
                      FROM pgmq.%I q
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
                    END IF;$e$, 'q_' || p_queue)
        ELSE format($e$
                    WITH chunk AS MATERIALIZED (
                        SELECT q.msg_id, q.vt FROM pgmq.%I q
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
                    v_chunk := v_chunk * 4;$e$, 'q_' || p_queue) END,
        CASE WHEN p_levels THEN $a$
                v_after_at := v_last_at;
                v_after_id := v_last_id;$a$
        ELSE $a$
                -- on after the last row read (a full pass: the last it returned)
                v_tied := CASE WHEN v_last = v_after THEN v_tied ELSE '{}' END || v_last_ids;
                v_after := v_last;$a$ END);
    EXECUTE format('REVOKE ALL ON FUNCTION drainpipe.%I(drainpipe.queue_flow, integer, timestamptz) FROM PUBLIC',
                   'flow_pick_jobs__' || p_queue);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_ensure_index(p_index text, p_table text, p_definition text)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- only when it is missing: CREATE INDEX IF NOT EXISTS locks the table (SHARE) before it
    -- looks, and such locks, taken by every ensure_policies() on a queue and then on its
    -- archive, deadlock with a completion, which writes the archive first
    IF to_regclass('pgmq.' || quote_ident(p_index)) IS NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I %s', p_index, p_table, p_definition);
    END IF;
END $function$;

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

CREATE OR REPLACE FUNCTION drainpipe.pgmq_has_last_read(p_queue text)
 RETURNS boolean LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = to_regclass('pgmq.q_' || p_queue)
                      AND attname = 'last_read_at' AND NOT attisdropped) $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_job_totals()
 RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_rows jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('queue', substr(TG_TABLE_NAME, 3), 'state', c.state, 'n', c.n))
          INTO v_rows
          FROM (SELECT CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                            WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS state,
                       count(*) AS n
                  FROM added a GROUP BY 1) c;
    ELSE
        SELECT jsonb_agg(jsonb_build_object('queue', substr(TG_TABLE_NAME, 3), 'state', c.state, 'n', -c.n))
          INTO v_rows
          FROM (SELECT CASE WHEN g.message ? 'cancelled' THEN 'cancelled'
                            WHEN g.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS state,
                       count(*) AS n
                  FROM gone g GROUP BY 1) c;
    END IF;
    IF v_rows IS NOT NULL THEN
        PERFORM drainpipe.add_job_totals(v_rows);
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_lease_bound_current(p_queue text, p_table regclass)
 RETURNS boolean LANGUAGE sql STABLE AS $function$
    -- does the queue table's lease bound (its constraint's comment) say the policy's
    -- max_lease? (none for none)
    SELECT (SELECT obj_description(c.oid, 'pg_constraint') FROM pg_constraint c
             WHERE c.conrelid = p_table AND c.conname = 'drainpipe_policy_lease')
           IS NOT DISTINCT FROM
           (SELECT p.max_lease::text FROM drainpipe.queue_policies p WHERE p.queue = p_queue) $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_lease_cols(p_queue text)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- what a claim reads of a row it leases (pgmq 1.5+ stamps last_read_at, the attempt's start)
    SELECT format('q.read_ct, q.vt, %s AS started_at,
                       q.read_ct >= coalesce((q.message ->> ''max_attempts'')::integer, 5) AS exhausted,
                       q.read_ct > 0 AND q.message ->> ''failed'' IS DISTINCT FROM q.read_ct::text AS lapsed',
                  CASE WHEN drainpipe.pgmq_has_last_read(p_queue) THEN 'q.last_read_at' ELSE 'NULL::timestamptz' END) $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_lease_refused(p_queue text, p_until timestamp with time zone, p_max double precision)
 RETURNS boolean LANGUAGE plpgsql AS $function$
BEGIN
    -- the last term of a policy queue's lease bound (ensure_lease_bound): a row over it.
    -- Executable by every role that writes the queue's table (privileges.sql)
    RAISE EXCEPTION 'a lease ending at % is longer than queue "%"''s max_lease of % s',
        p_until, p_queue, p_max USING ERRCODE = 'DPQ03';
END $function$;

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

CREATE OR REPLACE FUNCTION drainpipe.pgmq_list_by_ids(p_queue text)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_stamped boolean;
    v_last bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid) = 'clock_timestamp()' INTO v_stamped
      FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
     WHERE d.adrelid = format('pgmq.%I', 'q_' || p_queue)::regclass AND a.attname = 'enqueued_at';
    IF coalesce(v_stamped, false)
       AND to_regclass(format('pgmq.%I', 'q_' || p_queue || '_enqueued_idx')) IS NULL
       AND to_regclass(format('pgmq.%I', 'a_' || p_queue || '_enqueued_idx')) IS NULL THEN
        -- done already, or a queue made stamped (the full (enqueued_at, msg_id) indexes
        -- of an earlier listing are what this replaces)
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE pgmq.%I ALTER COLUMN enqueued_at SET DEFAULT clock_timestamp()',
                   'q_' || p_queue);
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgmq.%I',
                   'q_' || p_queue || '_msg_id_seq')
      INTO v_last;
    IF v_last > 0 AND NOT EXISTS (SELECT 1 FROM drainpipe.pgmq_list_before b WHERE b.queue = p_queue) THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id) WHERE msg_id <= %s',
                       'q_' || p_queue || '_old_enqueued', 'q_' || p_queue, v_last);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (enqueued_at, msg_id) WHERE msg_id <= %s',
                       'a_' || p_queue || '_old_enqueued', 'a_' || p_queue, v_last);
        INSERT INTO drainpipe.pgmq_list_before (queue, last_id) VALUES (p_queue, v_last);
    END IF;
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'q_' || p_queue || '_enqueued_idx');
    EXECUTE format('DROP INDEX IF EXISTS pgmq.%I', 'a_' || p_queue || '_enqueued_idx');
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_live_state(p_read_ct integer, p_message jsonb)
 RETURNS text LANGUAGE sql IMMUTABLE AS $function$
    SELECT CASE WHEN p_read_ct = 0 THEN 'queued'
                WHEN p_message ->> 'suspended' = p_read_ct::text
                     THEN CASE WHEN p_message ? 'waiting_for' THEN 'waiting' ELSE 'queued' END
                WHEN p_message ->> 'failed' = p_read_ct::text THEN 'retry_wait'
                ELSE 'leased' END $function$;

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

CREATE OR REPLACE FUNCTION drainpipe.pgmq_queue_policy_insert()
 RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'on' SET jit TO 'off' AS $function$
DECLARE
    r record;
BEGIN
    SELECT count(*) AS added, max(drainpipe.policy_payload_size(a.message -> 'payload')) AS largest,
           max(a.vt) AS latest
      INTO r FROM added a;
    IF r.added > 0 THEN
        PERFORM drainpipe.check_policy_insert(substr(TG_TABLE_NAME, 3), r.added, r.largest, r.latest);
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_records_ids_sql(p_queue text, p_from bigint, p_to bigint, p_ids bigint[] DEFAULT NULL::bigint[])
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- the listing's rows among these ids, newest first ($1 state, $2 tenant, $3 $4 $5 the
    -- cursor's stamp, id and queue, $6 now, $7 the page's size)
    SELECT drainpipe.pgmq_records_sql(p_queue, '$6',
        concat_ws(' AND ', 'true', 'r.id >= ' || p_from, 'r.id <= ' || p_to,
                  'r.id = ANY (' || quote_literal(p_ids::text) || '::bigint[])') || $w$
            AND ($3::timestamptz IS NULL
                 OR (r.enqueued_at, r.id) < ($3, $4 + CASE WHEN r.queue < $5 THEN 1 ELSE 0 END))
            AND ($2::text IS NULL OR r.tenant = $2)
            AND ($1::text IS NULL OR r.read_state = $1)$w$,
        'r.enqueued_at DESC, r.id DESC', '$7') $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_records_sql(p_queue text, p_now text, p_where text, p_order text, p_limit text)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- a queue's jobs as records' rows (r), the live ones then the archived ones, each part
    -- filtered by p_where, ordered by p_order and cut at p_limit, with the state and code
    -- they read as at p_now. The subqueries are flattened: p_where and p_order reach the
    -- tables' scans.
    SELECT format($sql$
        (SELECT * FROM (%1$s) r WHERE %3$s ORDER BY %4$s LIMIT %5$s)
        UNION ALL
        (SELECT * FROM (%2$s) r WHERE %3$s ORDER BY %4$s LIMIT %5$s)
    $sql$, format(t.read, p_now, format($b$
            SELECT m.msg_id AS id, %1$L::text AS queue,
                   drainpipe.pgmq_live_state(m.read_ct, m.message) AS stored_state,
                   m.read_ct AS attempts, coalesce((m.message ->> 'max_attempts')::integer, 5) AS max_attempts,
                   drainpipe.job_tenant(m.message -> 'payload') AS tenant,
                   m.message ->> 'dedupe_key' AS dedupe_key, m.enqueued_at, m.vt AS lease_end,
                   %3$s AS started_at, NULL::timestamptz AS finished_at,
                   m.message ->> 'last_code' AS last_code, (m.message ->> 'parent_id')::bigint AS parent_id,
                   NULL::bigint AS replayed_by
              FROM pgmq.%2$I m$b$, p_queue, 'q_' || p_queue,
            CASE WHEN t.last_read THEN 'm.last_read_at' ELSE 'NULL::timestamptz' END)),
        format(t.read, p_now, format($b$
            SELECT a.msg_id AS id, %1$L::text AS queue,
                   CASE WHEN a.message ? 'cancelled' THEN 'cancelled'
                        WHEN a.message ? 'dead' THEN 'dead' ELSE 'succeeded' END AS stored_state,
                   a.read_ct AS attempts, coalesce((a.message ->> 'max_attempts')::integer, 5) AS max_attempts,
                   drainpipe.job_tenant(a.message -> 'payload') AS tenant,
                   a.message ->> 'dedupe_key' AS dedupe_key, a.enqueued_at, a.vt AS lease_end,
                   %3$s AS started_at, a.archived_at AS finished_at,
                   CASE WHEN a.message ? 'cancelled' OR a.message ? 'dead' THEN a.message ->> 'last_code'
                        ELSE a.message ->> 'skipped' END AS last_code,
                   (a.message ->> 'parent_id')::bigint AS parent_id,
                   (a.message ->> 'replayed_by')::bigint AS replayed_by
              FROM pgmq.%2$I a$b$, p_queue, 'a_' || p_queue,
            CASE WHEN t.last_read THEN 'a.last_read_at' ELSE 'NULL::timestamptz' END)),
        p_where, p_order, p_limit)
      FROM (SELECT $r$
                SELECT s.*, CASE WHEN s.read_state = s.stored_state THEN s.last_code
                                 WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
                  FROM (SELECT b.*, drainpipe.job_state_at(b.stored_state, b.lease_end, b.attempts,
                                                           b.max_attempts, %s) AS read_state
                          FROM (%s) b) s$r$ AS read,
                   -- pgmq 1.5+ stamps last_read_at, the attempt's start
                   drainpipe.pgmq_has_last_read(p_queue) AS last_read) t $function$;

CREATE OR REPLACE FUNCTION drainpipe.pgmq_search_sql(p_queue text)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    -- the search's rows, newest id first ($1 state, $2 tenant, $3 $4 the cursor's id and
    -- queue, $5 now, $6 the page's size, $7 id, $8 dedupe_key, $9 $10 since and until, $11
    -- code: a dead job's code matches its cause too)
    SELECT drainpipe.pgmq_records_sql(p_queue, '$5', $w$($7::bigint IS NULL OR r.id = $7)
            AND ($3::bigint IS NULL OR r.id < $3 + CASE WHEN r.queue < $4 THEN 1 ELSE 0 END)
            AND ($8::text IS NULL OR r.dedupe_key = $8)
            AND ($9::timestamptz IS NULL OR r.enqueued_at >= $9)
            AND ($10::timestamptz IS NULL OR r.enqueued_at < $10)
            AND ($2::text IS NULL OR r.tenant = $2)
            AND ($1::text IS NULL OR r.read_state = $1)
            AND ($11::text IS NULL OR r.read_code = $11
                 OR (r.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                     AND drainpipe.job_cause(r.queue, r.id) = $11))$w$,
        'r.id DESC', '$6') $function$;

CREATE OR REPLACE FUNCTION drainpipe.recount_job_totals_v1(p_queues text[] DEFAULT NULL::text[])
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.ensure_queue_overview_v1(coalesce(p_queues, ARRAY(
        SELECT queue_name FROM pgmq.meta WHERE queue_name ~ '^[a-z_][a-z0-9_]{0,46}$')), true) $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v3(p_queue text, p_id bigint, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(new_job_id bigint, code text) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_rules record;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_message jsonb;
    v_read_ct integer;
    v_vt timestamptz;
    v_new bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- the policy row first (see replay_rules_in_force), then the job
    v_rules := drainpipe.replay_rules_in_force(p_queue, p_window, p_replayable);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    END IF;
    -- a last lease that ran out is a dead job already, not swept yet: sweep it now
    EXECUTE format('SELECT read_ct, message, vt FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE', 'q_' || p_queue)
      INTO v_read_ct, v_message, v_vt USING p_id;
    IF v_read_ct IS NOT NULL THEN
        IF drainpipe.job_state_at(drainpipe.pgmq_live_state(v_read_ct, v_message), v_vt, v_read_ct,
                                  coalesce((v_message ->> 'max_attempts')::integer, 5), v_now) <> 'dead' THEN
            RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_DEAD'::text;
            RETURN;
        END IF;
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_read_ct, NULL, v_vt, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        PERFORM drainpipe.pgmq_archive_job(p_queue, p_id,
            '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}', v_vt);
    END IF;
    -- no row: NULL
    EXECUTE format('SELECT message FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE', 'a_' || p_queue)
      INTO v_message USING p_id;
    code := CASE WHEN v_message IS NULL THEN 'JOB_NOT_FOUND'
                 WHEN v_message ? 'replayed_by' THEN 'JOB_ALREADY_REPLAYED'
                 WHEN NOT v_message ? 'dead' THEN 'JOB_NOT_DEAD'
                 ELSE drainpipe.replay_refusal(v_rules.replay_window, v_rules.replayable,
                          CASE WHEN v_rules.replay_window IS NULL THEN NULL
                               ELSE drainpipe.replay_origin(p_queue, p_id) END, v_now) END;
    IF code IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, code;
        RETURN;
    END IF;
    v_new := drainpipe.enqueue_job_v1(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1 AND NOT message ? ''parent_id''',
                   'q_' || p_queue)
      USING v_new, jsonb_build_object('parent_id', p_id);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1', 'a_' || p_queue)
      USING p_id, jsonb_build_object('replayed_by', v_new);
    RETURN QUERY SELECT v_new, NULL::text;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_origin(p_queue text, p_id bigint)
 RETURNS timestamp with time zone LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_origin timestamptz;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format(
        'WITH RECURSIVE lineage (id, parent_id, enqueued_at, depth) AS (
             SELECT a.msg_id, (a.message ->> ''parent_id'')::bigint, a.enqueued_at, 1
               FROM pgmq.%1$I AS a WHERE a.msg_id = $1
             UNION ALL
             SELECT a.msg_id, (a.message ->> ''parent_id'')::bigint, a.enqueued_at, l.depth + 1
               FROM lineage AS l JOIN pgmq.%1$I AS a ON a.msg_id = l.parent_id AND a.msg_id < l.id
              WHERE l.depth < 1000
         )
         SELECT min(enqueued_at) FROM lineage', 'a_' || p_queue)
      INTO v_origin USING p_id;
    RETURN v_origin;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.rewrite_job_payload_v1(p_queue text, p_id bigint, p_old jsonb, p_new jsonb)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_done integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    EXECUTE format(
        'UPDATE pgmq.%I SET message = jsonb_set(message, ''{payload}'', $3)
          WHERE msg_id = $1 AND message -> ''payload'' = $2', 'q_' || p_queue)
      USING p_id, p_old, p_new;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    RETURN v_done > 0;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.set_job_parent(p_queue text, p_ids bigint[], p_parent bigint)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    EXECUTE format('UPDATE pgmq.%I SET message = message || jsonb_build_object(''parent_id'', $2)
                     WHERE msg_id = ANY ($1)', 'q_' || p_queue)
      USING p_ids, p_parent;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_get_job(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = p_queue)
       OR to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        SELECT r.id, r.queue, r.read_state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
               r.dedupe_key, r.enqueued_at,
               CASE WHEN r.read_state IN ('queued', 'retry_wait') THEN r.lease_end END,
               r.started_at,
               CASE WHEN r.read_state = 'dead' AND r.finished_at IS NULL THEN r.lease_end ELSE r.finished_at END,
               r.read_code, r.parent_id, r.replayed_by,
               drainpipe.job_history_v1(r.queue, r.id, r.attempts, r.stored_state, r.started_at,
                   r.finished_at, r.lease_end, r.last_code, $6)
          FROM (%s) r
         LIMIT 1
    $sql$, drainpipe.pgmq_records_ids_sql(p_queue, p_id, p_id))
      USING NULL::text, NULL::text, NULL::timestamptz, 0::bigint, ''::text,
            coalesce(p_now, clock_timestamp()), 1;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_list_jobs_2(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'off' SET jit TO 'off' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_limit integer := greatest(coalesce(p_limit, 100), 1);
    v_queue record;
    v_window record;
    v_parts text[] := '{}';
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    FOR v_queue IN
        SELECT m.queue_name::text AS name, coalesce(b.last_id, 0) AS after,
               coalesce(p_before_id, 0)
                 + CASE WHEN m.queue_name::text < coalesce(p_before_queue, '') THEN 1 ELSE 0 END AS before_id
          FROM pgmq.meta m LEFT JOIN drainpipe.pgmq_list_before b ON b.queue = m.queue_name::text
         WHERE m.queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'
           AND (p_queue IS NULL OR m.queue_name = p_queue)
           AND to_regclass('pgmq.a_' || m.queue_name) IS NOT NULL
    LOOP
        v_window := drainpipe.pgmq_newest_window(v_queue.name, p_state, p_tenant, v_limit, p_before_at,
                                                 v_queue.before_id, v_now, v_queue.after);
        IF cardinality(v_window.ids) > 0 THEN
            -- the page's rows the walk found (each queue's page is these, by id)
            v_parts := v_parts || drainpipe.pgmq_records_ids_sql(v_queue.name, NULL, NULL, v_window.ids);
        END IF;
        IF v_queue.after > 0 THEN
            v_parts := v_parts || drainpipe.pgmq_records_ids_sql(v_queue.name, NULL, v_queue.after);
        END IF;
    END LOOP;
    IF cardinality(v_parts) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        SELECT r.id, r.queue, r.read_state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
               r.dedupe_key, r.enqueued_at,
               CASE WHEN r.read_state IN ('queued', 'retry_wait') THEN r.lease_end END,
               r.started_at,
               CASE WHEN r.read_state = 'dead' AND r.finished_at IS NULL THEN r.lease_end ELSE r.finished_at END,
               r.read_code, r.parent_id, r.replayed_by, NULL::jsonb
          FROM (%s) r
         ORDER BY r.enqueued_at DESC, r.id DESC, r.queue DESC
         LIMIT $7
    $sql$, array_to_string(v_parts, ' UNION ALL '))
      USING p_state, p_tenant, p_before_at, coalesce(p_before_id, 0), coalesce(p_before_queue, ''),
            v_now, v_limit;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_search_jobs(p_queue text, p_state text, p_tenant text, p_code text, p_since timestamp with time zone, p_until timestamp with time zone, p_dedupe_key text, p_id bigint, p_limit integer, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_parts text;
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    SELECT string_agg(drainpipe.pgmq_search_sql(m.queue_name), ' UNION ALL ')
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
               r.read_code, r.parent_id, r.replayed_by, NULL::jsonb
          FROM (%s) r
         ORDER BY r.id DESC, r.queue DESC
         LIMIT $6
    $sql$, v_parts)
      USING p_state, p_tenant, p_before_id, coalesce(p_before_queue, ''),
            coalesce(p_now, clock_timestamp()), greatest(coalesce(p_limit, 100), 1), p_id,
            p_dedupe_key, p_since, p_until, p_code;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.wake_job(p_queue text, p_id bigint, p_now timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_woken integer;
BEGIN
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('UPDATE pgmq.%I SET vt = least(vt, $2), message = message - ''waiting_for''
                     WHERE msg_id = $1 AND message ->> ''suspended'' = read_ct::text
                       AND message ? ''waiting_for''', 'q_' || p_queue)
      USING p_id, p_now;
    GET DIAGNOSTICS v_woken = ROW_COUNT;
    RETURN v_woken > 0;
END $function$;

RESET check_function_bodies;
