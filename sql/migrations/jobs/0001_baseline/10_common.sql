-- drainpipe's jobs module: queues, claims, records, policies, flow control, steps, schedules.
-- This part: what both storages share.
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Row types
DO $types$
BEGIN
    IF to_regtype('drainpipe.dead_job_v1') IS NULL THEN
        CREATE TYPE drainpipe.dead_job_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, died_at timestamp with time zone, message jsonb);
    END IF;
    IF to_regtype('drainpipe.job_queue_stats_v2') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v2 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, succeeded bigint, cancelled bigint, oldest_age_seconds double precision);
    END IF;
    IF to_regtype('drainpipe.job_queue_stats_v4') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v4 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, succeeded bigint, cancelled bigint, oldest_age_seconds double precision, paused boolean, held jsonb);
    END IF;
    IF to_regtype('drainpipe.job_record_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_record_v1 AS (id bigint, queue text, state text, attempts integer, max_attempts integer, deadline timestamp with time zone, tenant text, dedupe_key text, enqueued_at timestamp with time zone, eligible_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, last_code text, parent_id bigint, replayed_by bigint, history jsonb);
    END IF;
    IF to_regtype('drainpipe.job_row_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_row_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, visible_until timestamp with time zone, payload jsonb, max_attempts integer, last_error text);
    END IF;
    IF to_regtype('drainpipe.job_stamp_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_stamp_v1 AS (id bigint, at timestamp with time zone);
    END IF;
    IF to_regtype('drainpipe.job_turn_row_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_turn_row_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, visible_until timestamp with time zone, payload jsonb, max_attempts integer, last_error text, refused boolean);
    END IF;
    IF to_regtype('drainpipe.schedule_claim_v1') IS NULL THEN
        CREATE TYPE drainpipe.schedule_claim_v1 AS (name text, cron text, time_zone text, queue text, payload jsonb, next_run timestamp with time zone, first_after timestamp with time zone, claim_token uuid);
    END IF;
    IF to_regtype('drainpipe.schedule_entry_v1') IS NULL THEN
        CREATE TYPE drainpipe.schedule_entry_v1 AS (name text, cron text, time_zone text, queue text, tenant text, next_run timestamp with time zone, last_run timestamp with time zone, leased_until timestamp with time zone, created_at timestamp with time zone);
    END IF;
END
$types$;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.flow_budget (
    queue text NOT NULL,
    epoch bigint,
    concurrency integer NOT NULL,
    cap bigint NOT NULL,
    granted bigint NOT NULL,
    stamp bigint,
    grants regclass,
    grant_base bigint,
    CONSTRAINT flow_budget_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.flow_budget ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.flow_claims (
    queue text NOT NULL,
    key text,
    claimed_at timestamp with time zone NOT NULL
);
CREATE INDEX IF NOT EXISTS flow_claims_key_idx ON drainpipe.flow_claims USING btree (queue, key, claimed_at) WHERE (key IS NOT NULL);
CREATE INDEX IF NOT EXISTS flow_claims_queue_idx ON drainpipe.flow_claims USING btree (queue, claimed_at);
ALTER TABLE drainpipe.flow_claims ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.flow_enqueues (
    queue text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    accepted_at timestamp with time zone NOT NULL,
    CONSTRAINT flow_enqueues_pkey PRIMARY KEY (queue, key)
);
ALTER TABLE drainpipe.flow_enqueues ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_attempts (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    started_at timestamp with time zone,
    ended_at timestamp with time zone,
    outcome text NOT NULL,
    code text,
    late_outcome text,
    CONSTRAINT job_attempts_pkey PRIMARY KEY (queue, job_id, number)
);
CREATE INDEX IF NOT EXISTS job_attempts_failed_idx ON drainpipe.job_attempts USING btree (queue, ended_at) WHERE (outcome = ANY (ARRAY['failed'::text, 'discarded'::text, 'expired'::text]));
ALTER TABLE drainpipe.job_attempts ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    key text NOT NULL,
    data jsonb,
    emitted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT job_events_pkey PRIMARY KEY (id)
);
CREATE INDEX IF NOT EXISTS job_events_emitted_brin ON drainpipe.job_events USING brin (emitted_at);
CREATE INDEX IF NOT EXISTS job_events_match_idx ON drainpipe.job_events USING btree (name, key, id);
ALTER TABLE drainpipe.job_events ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_retention_runs (
    id integer NOT NULL,
    last_run timestamp with time zone,
    CONSTRAINT job_retention_runs_pkey PRIMARY KEY (id),
    CONSTRAINT job_retention_runs_id_check CHECK ((id = 1))
);
ALTER TABLE drainpipe.job_retention_runs ENABLE ROW LEVEL SECURITY;
INSERT INTO drainpipe.job_retention_runs (id, last_run)
VALUES ('1', NULL)
ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS drainpipe.job_steps (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    name text NOT NULL,
    state text NOT NULL,
    result jsonb,
    event_id bigint,
    code text,
    started_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone NOT NULL,
    CONSTRAINT job_steps_pkey PRIMARY KEY (queue, job_id, number)
);
ALTER TABLE drainpipe.job_steps ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_totals (
    queue text NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT job_totals_pkey PRIMARY KEY (queue, state, shard)
);
ALTER TABLE drainpipe.job_totals ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_totals_kept (
    queue text NOT NULL,
    CONSTRAINT job_totals_kept_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.job_totals_kept ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.job_workflows (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    suspensions integer DEFAULT 0 NOT NULL,
    last_fence integer,
    waiting_for text,
    wait_number integer,
    wait_event text,
    wait_key text,
    wait_deadline timestamp with time zone,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    waiting_since timestamp with time zone,
    CONSTRAINT job_workflows_pkey PRIMARY KEY (queue, job_id)
);
CREATE INDEX IF NOT EXISTS job_workflows_waiting_idx ON drainpipe.job_workflows USING btree (wait_event, wait_key) WHERE (wait_event IS NOT NULL);
ALTER TABLE drainpipe.job_workflows ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.management_audit (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    at timestamp with time zone NOT NULL,
    target text NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    queue text,
    job_id bigint,
    outcome text NOT NULL,
    code text,
    idempotency_key text,
    new_job_id bigint,
    detail jsonb,
    CONSTRAINT management_audit_pkey PRIMARY KEY (id),
    CONSTRAINT management_audit_action_check CHECK ((action = ANY (ARRAY['cancel'::text, 'replay'::text, 'pause'::text, 'resume'::text, 'bulk_cancel'::text, 'bulk_replay'::text]))),
    CONSTRAINT management_audit_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT management_audit_code_check CHECK ((code ~ '^[A-Z][A-Z0-9_]{0,63}$'::text)),
    CONSTRAINT management_audit_idempotency_key_check CHECK ((length(idempotency_key) <= 255)),
    CONSTRAINT management_audit_outcome_check CHECK ((outcome = ANY (ARRAY['ok'::text, 'refused'::text]))),
    CONSTRAINT management_audit_target_check CHECK (((length(target) >= 1) AND (length(target) <= 200)))
);
CREATE INDEX IF NOT EXISTS management_audit_target_id ON drainpipe.management_audit USING btree (target, id DESC);

CREATE TABLE IF NOT EXISTS drainpipe.queue_flow (
    queue text NOT NULL,
    concurrency integer,
    key_concurrency integer,
    rate_count integer,
    rate_per double precision,
    key_rate_count integer,
    key_rate_per double precision,
    ordered boolean DEFAULT false NOT NULL,
    lease_window double precision,
    leases_end_by timestamp with time zone,
    CONSTRAINT queue_flow_pkey PRIMARY KEY (queue),
    CONSTRAINT queue_flow_check CHECK (((rate_count IS NULL) = (rate_per IS NULL))),
    CONSTRAINT queue_flow_check1 CHECK (((key_rate_count IS NULL) = (key_rate_per IS NULL))),
    CONSTRAINT queue_flow_concurrency_check CHECK ((concurrency > 0)),
    CONSTRAINT queue_flow_key_concurrency_check CHECK ((key_concurrency > 0)),
    CONSTRAINT queue_flow_key_rate_count_check CHECK ((key_rate_count > 0)),
    CONSTRAINT queue_flow_key_rate_per_check CHECK ((key_rate_per > (0)::double precision)),
    CONSTRAINT queue_flow_rate_count_check CHECK ((rate_count > 0)),
    CONSTRAINT queue_flow_rate_per_check CHECK ((rate_per > (0)::double precision))
);
ALTER TABLE drainpipe.queue_flow ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.queue_pauses (
    queue text NOT NULL,
    paused_at timestamp with time zone NOT NULL,
    CONSTRAINT queue_pauses_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.queue_pauses ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.queue_pending (
    queue text NOT NULL,
    live bigint DEFAULT 0 NOT NULL,
    CONSTRAINT queue_pending_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.queue_pending ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.queue_policies (
    queue text NOT NULL,
    max_payload_bytes integer NOT NULL,
    max_pending integer NOT NULL,
    lease double precision NOT NULL,
    max_lease double precision NOT NULL,
    max_delay double precision NOT NULL,
    max_attempts integer NOT NULL,
    attempt_window double precision,
    retention double precision NOT NULL,
    encrypt boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    replay_window double precision,
    replayable boolean DEFAULT true NOT NULL,
    CONSTRAINT queue_policies_pkey PRIMARY KEY (queue),
    CONSTRAINT queue_policies_attempt_window_check CHECK ((attempt_window > (0)::double precision)),
    CONSTRAINT queue_policies_check CHECK ((max_lease >= lease)),
    CONSTRAINT queue_policies_lease_check CHECK ((lease > (0)::double precision)),
    CONSTRAINT queue_policies_max_attempts_check CHECK ((max_attempts > 0)),
    CONSTRAINT queue_policies_max_delay_check CHECK ((max_delay > (0)::double precision)),
    CONSTRAINT queue_policies_max_payload_bytes_check CHECK ((max_payload_bytes > 0)),
    CONSTRAINT queue_policies_max_pending_check CHECK ((max_pending > 0)),
    CONSTRAINT queue_policies_replay_window_check CHECK ((replay_window > (0)::double precision)),
    CONSTRAINT queue_policies_retention_check CHECK ((retention > (0)::double precision))
);
ALTER TABLE drainpipe.queue_policies ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.queue_priorities (
    queue text NOT NULL,
    levels integer[] NOT NULL,
    CONSTRAINT queue_priorities_pkey PRIMARY KEY (queue)
);
ALTER TABLE drainpipe.queue_priorities ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.add_job_totals(p_rows jsonb)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    c_shards constant integer := 16;
    c_lock constant integer := hashtext('drainpipe.job_totals');
    v_start integer := pg_backend_pid() % c_shards;
    v_shard integer := v_start;
    v_probe integer := 0;
BEGIN
    -- the pid spreads the lanes over the shards (and a held snapshot's row versions with
    -- them); the probe steps aside from a shard another open transaction writes. Only the
    -- holder of a shard's lock writes its rows (and a recount, which locks the settlers out
    -- of the records it counts first).
    WHILE v_probe < c_shards
          AND NOT pg_try_advisory_xact_lock(c_lock, v_shard) LOOP
        v_probe := v_probe + 1;
        v_shard := (v_start + v_probe) % c_shards;
    END LOOP;
    IF v_probe = c_shards THEN  -- every shard is being written: wait for the pid's one
        PERFORM pg_advisory_xact_lock(c_lock, v_shard);
    END IF;
    INSERT INTO drainpipe.job_totals AS t (queue, state, shard, n)
    SELECT r.queue, r.state, v_shard::smallint, r.n
      FROM jsonb_to_recordset(p_rows) AS r(queue text, state text, n bigint)
     WHERE r.n <> 0
     ORDER BY r.queue, r.state  -- one lock order for every writer
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = t.n + excluded.n;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.apply_job_retention_v1(p_min_interval double precision DEFAULT NULL::double precision, p_batch integer DEFAULT 10000, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_policy drainpipe.queue_policies;
    v_total integer := 0;
    v_ids bigint[];
BEGIN
    IF p_min_interval IS NOT NULL THEN
        UPDATE drainpipe.job_retention_runs SET last_run = v_now
         WHERE id = 1 AND (last_run IS NULL OR last_run <= v_now - make_interval(secs => p_min_interval));
        IF NOT FOUND THEN
            RETURN NULL;  -- ran less than p_min_interval ago (or another caller runs it now)
        END IF;
    END IF;
    FOR v_policy IN SELECT * FROM drainpipe.queue_policies ORDER BY queue LOOP
        v_ids := drainpipe.delete_finished_jobs(v_policy.queue,
            v_now - make_interval(secs => v_policy.retention),
            v_now - make_interval(secs => v_policy.retention), p_batch);
        PERFORM drainpipe.forget_job_steps(v_policy.queue, v_ids);
        v_total := v_total + cardinality(v_ids);
    END LOOP;
    PERFORM drainpipe.purge_job_events_v1(604800, v_now);
    RETURN v_total;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_event_name(p_event text, p_key text)
 RETURNS void LANGUAGE plpgsql IMMUTABLE AS $function$
BEGIN
    IF p_event IS NULL OR length(p_event) = 0 OR length(p_event) > 200 THEN
        RAISE EXCEPTION 'event must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL OR length(p_key) > 200 THEN
        RAISE EXCEPTION 'event key must be at most 200 characters' USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_job_code(p_code text)
 RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF NOT drainpipe.is_job_code(p_code) THEN
        RAISE EXCEPTION 'Invalid code "%": uppercase letters, digits and underscores, starting with a letter, at most 64', p_code
            USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_max_attempts(p_max_attempts integer)
 RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be at least 1, not %', p_max_attempts USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_queue_name(p_queue text)
 RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_queue IS NULL OR p_queue !~ '^[a-z_][a-z0-9_]{0,46}$' THEN
        RAISE EXCEPTION 'Invalid queue name "%": lowercase letters, digits and underscores, at most 47', p_queue
            USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_schedule_form(p_cron text)
 RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_text text := lower(btrim(coalesce(p_cron, ''), E' \t\r\n'));
BEGIN
    IF v_text ~ '^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$' THEN
        RETURN;
    END IF;
    IF v_text ~ '^[0-9]+\s+(second|minute|hour)s?$' THEN
        IF substring(v_text FROM '^([0-9]+)')::numeric < 1 THEN
            RAISE EXCEPTION 'Invalid schedule %: the interval must be positive', p_cron USING ERRCODE = '22023';
        END IF;
        RETURN;
    END IF;
    IF v_text ~ '^\S+(\s+\S+){4}$' THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'Invalid schedule %: expected five cron fields, a macro such as @daily, or an interval such as 5 minutes', p_cron
        USING ERRCODE = '22023';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_turn_arrays(p_ids bigint[], p_attempts integer[])
 RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF coalesce(cardinality(p_ids), 0) IS DISTINCT FROM coalesce(cardinality(p_attempts), 0) THEN
        RAISE EXCEPTION 'complete_and_claim_jobs_v1: % ids but % attempts',
            coalesce(cardinality(p_ids), 0), coalesce(cardinality(p_attempts), 0)
            USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.audit_bulk_action_v1(p_target text, p_actor text, p_action text, p_queue text, p_idempotency_key text, p_detail jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, outcome, idempotency_key, detail)
    VALUES (coalesce(p_now, clock_timestamp()), p_target, p_actor, p_action, p_queue, 'ok',
            p_idempotency_key, p_detail)
    RETURNING id $function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_cancel_job_v1(p_target text, p_actor text, p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_result text;
    v_outcome text;
BEGIN
    v_result := drainpipe.cancel_job_v1(p_queue, p_id, p_now);
    IF v_result IS NULL THEN
        RETURN NULL;
    END IF;
    v_outcome := CASE WHEN v_result = 'cancelled' THEN 'ok' ELSE 'refused' END;
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, job_id, outcome, code)
    VALUES (
        coalesce(p_now, clock_timestamp()), p_target, p_actor, 'cancel', p_queue, p_id,
        v_outcome, CASE WHEN v_outcome = 'refused' THEN 'JOB_NOT_CANCELLABLE' END
    );
    RETURN v_outcome;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_pause_queue_v1(p_target text, p_actor text, p_queue text, p_pause boolean, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_changed boolean;
BEGIN
    v_changed := CASE WHEN p_pause THEN drainpipe.pause_queue_v1(p_queue, p_now)
                      ELSE drainpipe.resume_queue_v1(p_queue) END;
    INSERT INTO drainpipe.management_audit (at, target, actor, action, queue, outcome, code)
    VALUES (coalesce(p_now, clock_timestamp()), p_target, p_actor,
            CASE WHEN p_pause THEN 'pause' ELSE 'resume' END, p_queue,
            CASE WHEN v_changed THEN 'ok' ELSE 'refused' END,
            CASE WHEN v_changed THEN NULL
                 WHEN p_pause THEN 'QUEUE_ALREADY_PAUSED' ELSE 'QUEUE_NOT_PAUSED' END);
    RETURN CASE WHEN v_changed THEN 'ok' ELSE 'refused' END;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v2(p_target text, p_actor text, p_queue text, p_id bigint, p_idempotency_key text, p_refusal text DEFAULT NULL::text, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, code text, new_job_id bigint) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_new bigint;
    v_code text;
BEGIN
    IF p_refusal IS NOT NULL THEN
        PERFORM 1 FROM drainpipe.get_job_v1(p_queue, p_id, p_now);
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_code := p_refusal;
    ELSE
        SELECT r.new_job_id, r.code INTO v_new, v_code
          FROM drainpipe.replay_dead_job_v3(p_queue, p_id, p_window, p_replayable, p_now) AS r;
        IF v_code = 'JOB_NOT_FOUND' THEN
            RETURN;
        END IF;
    END IF;
    outcome := CASE WHEN v_new IS NULL THEN 'refused' ELSE 'ok' END;
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, job_id, outcome, code, idempotency_key, new_job_id)
    VALUES (
        coalesce(p_now, clock_timestamp()), p_target, p_actor, 'replay', p_queue, p_id,
        outcome, v_code, p_idempotency_key, v_new
    );
    code := v_code;
    new_job_id := v_new;
    RETURN NEXT;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.bury_job_v1(p_queue text, p_id bigint, p_attempt integer, p_error text, p_code text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, NULL, p_code, true, p_now) = 'dead', false) $function$;

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_children_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_child record;
    v_count integer := 0;
BEGIN
    FOR v_child IN
        SELECT s.result ->> 'queue' AS queue, jsonb_array_elements_text(s.result -> 'ids')::bigint AS id
          FROM drainpipe.job_steps s
         WHERE s.queue = p_queue AND s.job_id = p_id AND s.name LIKE 'spawn:%' AND s.state = 'done'
    LOOP
        IF drainpipe.cancel_job_v1(v_child.queue, v_child.id, p_now) = 'cancelled' THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.check_policy_insert(p_queue text, p_added bigint, p_largest bigint, p_latest timestamp with time zone)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_seqscan TO 'on' SET jit TO 'off' AS $function$
DECLARE
    v_policy drainpipe.queue_policies;
    v_live bigint;
BEGIN
    SELECT * INTO v_policy FROM drainpipe.queue_policies WHERE queue = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_largest > drainpipe.policy_payload_limit(v_policy) THEN
        RAISE EXCEPTION 'payload is % bytes as stored, more than queue "%" allows (max_payload_bytes %)',
            p_largest, p_queue, v_policy.max_payload_bytes USING ERRCODE = 'DPQ01';
    END IF;
    -- a second of slack: the client computed the delay a moment before the insert
    IF p_latest > clock_timestamp() + make_interval(secs => v_policy.max_delay + 1) THEN
        RAISE EXCEPTION 'the job would run more than % s ahead, past queue "%"''s max_delay',
            v_policy.max_delay, p_queue USING ERRCODE = 'DPQ04';
    END IF;
    UPDATE drainpipe.queue_pending SET live = live + p_added WHERE queue = p_queue
    RETURNING live INTO v_live;
    IF v_live > v_policy.max_pending THEN
        -- our own new rows included (this transaction sees them)
        v_live := drainpipe.count_live_jobs(p_queue, v_policy.max_pending + 1);
        UPDATE drainpipe.queue_pending SET live = v_live WHERE queue = p_queue;
        IF v_live > v_policy.max_pending THEN
            RAISE EXCEPTION 'queue "%" already holds its max_pending of % live jobs',
                p_queue, v_policy.max_pending USING ERRCODE = 'DPQ02';
        END IF;
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.child_outcomes_v1(p_queue text, p_ids bigint[])
 RETURNS TABLE(id bigint, state text, last_code text, kept boolean, result jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT c.id, c.state, c.last_code, r.job_id IS NOT NULL, r.result
      FROM drainpipe.child_job_states(p_queue, p_ids) AS c
      LEFT JOIN drainpipe.job_steps r ON r.queue = p_queue AND r.job_id = c.id AND r.number = 0 $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_bound(p_queue text, p_now timestamp with time zone)
 RETURNS timestamp with time zone LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_passed bigint := nullif(current_setting('drainpipe.claim_passed.' || p_queue, true), '')::bigint;
    v_from bigint := nullif(current_setting('drainpipe.claim_from.' || p_queue, true), '')::bigint;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_passed_at timestamptz := 'epoch'::timestamptz + v_passed * interval '1 microsecond';
BEGIN
    IF v_from IS NULL OR v_passed IS NULL
       OR v_passed_at NOT BETWEEN v_now - drainpipe.claim_bound_pass() AND v_now THEN
        PERFORM set_config('drainpipe.claim_passed.' || p_queue,
                           (extract(epoch FROM v_now) * 1000000)::bigint::text, false);
        RETURN '-infinity';
    END IF;
    RETURN 'epoch'::timestamptz + v_from * interval '1 microsecond';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_bound_pass()
 RETURNS interval LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
 SELECT interval '10 seconds' $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_job_v1(p_queue text, p_id bigint, p_attempt integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_now)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.counted_job_records(p_records drainpipe.job_record_v1[])
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT r.id, r.queue, r.state,
           CASE WHEN w.suspensions > 0
                THEN greatest(0, r.attempts - (w.suspensions
                                               - CASE WHEN r.attempts = w.last_fence THEN 1 ELSE 0 END))
                ELSE r.attempts END,
           CASE WHEN w.suspensions > 0 THEN greatest(1, r.max_attempts - w.suspensions)
                ELSE r.max_attempts END,
           r.deadline, r.tenant, r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at,
           r.finished_at, r.last_code, r.parent_id, r.replayed_by, r.history
      FROM unnest(p_records) WITH ORDINALITY AS r
      LEFT JOIN drainpipe.job_workflows w ON w.queue = r.queue AND w.job_id = r.id
     ORDER BY r.ordinality $function$;

CREATE OR REPLACE FUNCTION drainpipe.emit_event_v1(p_event text, p_key text, p_data jsonb DEFAULT NULL::jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_id bigint;
    v_waiter record;
BEGIN
    PERFORM drainpipe.assert_event_name(p_event, p_key);
    PERFORM drainpipe.lock_job_event(p_event, p_key);
    INSERT INTO drainpipe.job_events (name, key, data, emitted_at)
    VALUES (p_event, p_key, p_data, v_now)
    RETURNING id INTO v_id;
    FOR v_waiter IN
        SELECT w.queue, w.job_id FROM drainpipe.job_workflows w
         WHERE w.wait_event = p_event AND w.wait_key = p_key
         ORDER BY w.queue, w.job_id
    LOOP
        PERFORM drainpipe.wake_job(v_waiter.queue, v_waiter.job_id, v_now);
        UPDATE drainpipe.job_workflows
           SET waiting_for = NULL, wait_event = NULL, wait_key = NULL, updated_at = v_now
         WHERE queue = v_waiter.queue AND job_id = v_waiter.job_id;
    END LOOP;
    RETURN v_id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_flow_job_v1(p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer, p_dedupe_key text, p_dedupe_running boolean, p_key text, p_debounce double precision, p_throttle double precision)
 RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_id bigint;
    v_at timestamptz;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_key IS NULL OR (p_debounce IS NULL) = (p_throttle IS NULL)
       OR coalesce(p_debounce, p_throttle) <= 0 THEN
        RAISE EXCEPTION 'debounce or throttle (one, positive) needs a key'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow_enqueue:' || p_queue), hashtext(p_key));
    SELECT e.job_id, e.accepted_at INTO v_id, v_at
      FROM drainpipe.flow_enqueues e WHERE e.queue = p_queue AND e.key = p_key;
    IF p_throttle IS NOT NULL THEN
        IF v_id IS NOT NULL AND v_at > v_now - make_interval(secs => p_throttle) THEN
            RETURN v_id;
        END IF;
        v_id := drainpipe.enqueue_job_v1(p_queue, p_payload, p_delay, p_max_attempts,
                                         p_dedupe_key, p_dedupe_running);
    ELSE
        IF v_id IS NOT NULL AND drainpipe.debounce_job(p_queue, v_id, p_payload, p_debounce) THEN
            RETURN v_id;
        END IF;
        v_id := drainpipe.enqueue_job_v1(p_queue, p_payload, p_debounce, p_max_attempts,
                                         p_dedupe_key, p_dedupe_running);
    END IF;
    INSERT INTO drainpipe.flow_enqueues AS e (queue, key, job_id, accepted_at)
    VALUES (p_queue, p_key, v_id, v_now)
    ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, accepted_at = excluded.accepted_at;
    RETURN v_id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(p_queue text, p_concurrency integer, p_key_concurrency integer, p_rate_count integer, p_rate_per double precision, p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_stamp bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- two sequences per queue with a concurrency: the budget's stamp, which a change of
    -- limits or a new epoch advances (a chunk a session keeps is spent only while the stamp
    -- reads what the session saw), and the chunks an epoch grants, one nextval each
    IF p_concurrency IS NOT NULL AND drainpipe.flow_budget_sequence(p_queue) IS NULL THEN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS drainpipe.%I', 'flow_budget__' || p_queue);
    END IF;
    -- each on its own: a queue limited before grants came from a sequence has the stamp only
    IF p_concurrency IS NOT NULL
       AND to_regclass('drainpipe.' || quote_ident('flow_grant__' || p_queue)) IS NULL THEN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS drainpipe.%I', 'flow_grant__' || p_queue);
    END IF;
    -- the epoch closed and the stamp advanced, whether an epoch is open or not (a chunk kept
    -- from one that a spent budget closed is not spent under other limits); what the epoch
    -- granted stays in its row (chunks in flight still count until an exact count)
    v_stamp := drainpipe.flow_budget_advance(p_queue);
    UPDATE drainpipe.flow_budget b SET epoch = NULL, stamp = v_stamp WHERE b.queue = p_queue;
    IF p_concurrency IS NULL AND p_key_concurrency IS NULL AND p_rate_count IS NULL
       AND p_key_rate_count IS NULL AND NOT coalesce(p_ordered, false) THEN
        DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;
        RETURN;
    END IF;
    INSERT INTO drainpipe.queue_flow AS f (queue, concurrency, key_concurrency, rate_count,
                                           rate_per, key_rate_count, key_rate_per, ordered)
    VALUES (p_queue, p_concurrency, p_key_concurrency, p_rate_count, p_rate_per,
            p_key_rate_count, p_key_rate_per, coalesce(p_ordered, false))
    ON CONFLICT (queue) DO UPDATE
       SET concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
           rate_count = excluded.rate_count, rate_per = excluded.rate_per,
           key_rate_count = excluded.key_rate_count, key_rate_per = excluded.key_rate_per,
           ordered = excluded.ordered;
    -- after the row: pgmq builds the indexes the new limits read (jobs 0022)
    PERFORM drainpipe.ensure_flow_indexes(p_queue);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v3(p_queue text, p_max_payload_bytes integer, p_max_pending integer, p_lease double precision, p_max_lease double precision, p_max_delay double precision, p_max_attempts integer, p_attempt_window double precision, p_retention double precision, p_encrypt boolean, p_replay_window double precision, p_replayable boolean, p_concurrency integer DEFAULT NULL::integer, p_key_concurrency integer DEFAULT NULL::integer, p_rate_count integer DEFAULT NULL::integer, p_rate_per double precision DEFAULT NULL::double precision, p_key_rate_count integer DEFAULT NULL::integer, p_key_rate_per double precision DEFAULT NULL::double precision, p_ordered boolean DEFAULT false)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- before the policy row: a replay in flight holds this lock shared (see
    -- replay_rules_in_force), so a queue's first policy, which has no row a replay could
    -- have locked yet, is ordered with replays too
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_policies AS p (queue, max_payload_bytes, max_pending, lease,
        max_lease, max_delay, max_attempts, attempt_window, retention, encrypt, replay_window,
        replayable)
    VALUES (p_queue, p_max_payload_bytes, p_max_pending, p_lease, p_max_lease, p_max_delay,
            p_max_attempts, p_attempt_window, p_retention, p_encrypt, p_replay_window,
            coalesce(p_replayable, true))
    ON CONFLICT (queue) DO UPDATE SET
        max_payload_bytes = excluded.max_payload_bytes, max_pending = excluded.max_pending,
        lease = excluded.lease, max_lease = excluded.max_lease, max_delay = excluded.max_delay,
        max_attempts = excluded.max_attempts, attempt_window = excluded.attempt_window,
        retention = excluded.retention, encrypt = excluded.encrypt,
        replay_window = excluded.replay_window, replayable = excluded.replayable,
        updated_at = clock_timestamp();
    PERFORM drainpipe.attach_queue_policy_v1(p_queue);
    PERFORM drainpipe.ensure_queue_flow_v1(p_queue, p_concurrency, p_key_concurrency,
        p_rate_count, p_rate_per, p_key_rate_count, p_key_rate_per, p_ordered);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease_v1(p_queue text, p_id bigint, p_attempt integer, p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease, p_now)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_advance(p_queue text)
 RETURNS bigint LANGUAGE plpgsql AS $function$
DECLARE
    v_sequence regclass := drainpipe.flow_budget_sequence(p_queue);
BEGIN
    IF v_sequence IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN nextval(v_sequence);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_applies(p_flow drainpipe.queue_flow)
 RETURNS boolean LANGUAGE sql IMMUTABLE AS $function$
    SELECT p_flow.concurrency IS NOT NULL AND p_flow.rate_count IS NULL
       AND p_flow.key_concurrency IS NULL AND p_flow.key_rate_count IS NULL
       AND NOT p_flow.ordered $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_chunk(p_concurrency integer)
 RETURNS bigint LANGUAGE sql IMMUTABLE AS $function$
    SELECT least(1000, greatest(200, p_concurrency / 64))::bigint $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_granted(p_budget drainpipe.flow_budget, p_chunk bigint)
 RETURNS bigint LANGUAGE sql AS $function$
    -- what the budget's epoch has handed out: the counting claim's room and every chunk
    -- granted so far (a nextval of a rolled-back claim too: a chunk is never granted twice).
    -- Volatile, as the sequence it reads, so that the planner inlines it
    SELECT p_budget.granted + p_chunk * least(
        (p_budget.cap - p_budget.granted) / p_chunk,
        coalesce(pg_sequence_last_value(p_budget.grants) - p_budget.grant_base, 0)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_held(p_queue text)
 RETURNS boolean LANGUAGE sql STABLE AS $function$
    -- does this transaction hold the queue's flow lock shared? (flow_budget_take marks it;
    -- flow_budget_spend does not, so a connection with a chunk asks the lock table: a claim
    -- holding it must not wait for the exclusive lock beside another that does the same)
    SELECT coalesce(current_setting('drainpipe.flow_budget_locked.' || p_queue, true) = 'on', false)
        OR (coalesce(current_setting('drainpipe.flow_budget.' || p_queue, true) <> '', false) AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.mode = 'ShareLock'
               AND l.classid = (hashtext('drainpipe.flow')::bigint & 4294967295)::oid
               AND l.objid = (hashtext(p_queue)::bigint & 4294967295)::oid AND l.objsubid = 2)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_keep(p_queue text, p_epoch bigint, p_left bigint, p_seen bigint, p_sequence regclass)
 RETURNS void LANGUAGE plpgsql AS $function$
BEGIN
    -- the connection's chunk: what is left of it ('' for none), its epoch, and the value of
    -- the queue's sequence it was taken under ('' when a change was pending then: spent only
    -- through flow_budget_take), with the sequence's oid (plpgsql: its plan is kept)
    PERFORM set_config('drainpipe.flow_budget.' || p_queue, coalesce(p_left::text, ''), false),
            set_config('drainpipe.flow_budget_epoch.' || p_queue, coalesce(p_epoch::text, ''), false),
            set_config('drainpipe.flow_budget_seen.' || p_queue, coalesce(p_seen::text, ''), false),
            set_config('drainpipe.flow_budget_sequence.' || p_queue, coalesce(p_sequence::oid::text, ''), false);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_pending(p_queue text)
 RETURNS bigint LANGUAGE sql AS $function$
    SELECT current_setting('drainpipe.flow_budget_pending.' || p_queue)::bigint $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_reset(p_flow drainpipe.queue_flow, p_leased bigint, p_room integer)
 RETURNS void LANGUAGE plpgsql AS $function$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_cap bigint := p_flow.concurrency - p_leased;
    v_stamp bigint;
    v_grants regclass;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) THEN
        -- other limits: no epoch is open (the change of limits closed it), nothing to do
        RETURN;
    END IF;
    -- this session's own leftover was counted as nothing: forget it
    PERFORM drainpipe.flow_budget_keep(p_flow.queue, NULL, NULL, NULL, NULL);
    v_grants := to_regclass('drainpipe.' || quote_ident('flow_grant__' || p_flow.queue));
    IF v_cap - p_room >= 16 * c_chunk AND v_grants IS NOT NULL THEN
        -- an epoch: cap - granted in chunks, the n-th chunk granted by the n-th nextval of
        -- the grant sequence past grant_base (see flow_budget_take)
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        INSERT INTO drainpipe.flow_budget AS b (queue, epoch, concurrency, cap, granted, stamp,
                                                grants, grant_base)
        VALUES (p_flow.queue, coalesce(v_stamp, pg_current_xact_id()::text::bigint), p_flow.concurrency,
                v_cap, p_room, v_stamp, v_grants, nextval(v_grants))
        ON CONFLICT (queue) DO UPDATE
           SET epoch = excluded.epoch, concurrency = excluded.concurrency, cap = excluded.cap,
               granted = excluded.granted, stamp = excluded.stamp, grants = excluded.grants,
               grant_base = excluded.grant_base;
    ELSIF EXISTS (SELECT 1 FROM drainpipe.flow_budget b
                   WHERE b.queue = p_flow.queue AND (b.epoch IS NOT NULL OR b.granted <> 0)) THEN
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        UPDATE drainpipe.flow_budget b SET epoch = NULL, granted = 0, grant_base = NULL, stamp = v_stamp
         WHERE b.queue = p_flow.queue;
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_sequence(p_queue text)
 RETURNS regclass LANGUAGE sql STABLE AS $function$
    SELECT to_regclass('drainpipe.' || quote_ident('flow_budget__' || p_queue)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_spend(p_queue text, p_batch integer)
 RETURNS integer LANGUAGE sql AS $function$
    -- The connection's chunk spent by one expression, which the planner inlines into the
    -- claim's: p_batch, or NULL (the claim asks flow_budget_take) unless a batch of at most
    -- 100 fits in what is left of it and the queue's sequence still reads what the
    -- connection saw when it took the chunk, before the shared lock (a change sends the
    -- claim to the row, free to count under the exclusive lock) and under it (no count runs
    -- until the claim commits). The chunk is kept in four settings (see flow_budget_keep),
    -- so that the expression splits no string. Keep it one SELECT of one expression: a
    -- FROM, a subquery, SECURITY DEFINER or a SET clause would make it a call again.
    SELECT CASE WHEN p_batch <= 100
                 AND coalesce(current_setting('drainpipe.flow_budget_seen.' || p_queue, true), '') <> ''
           THEN CASE WHEN current_setting('drainpipe.flow_budget.' || p_queue)::bigint >= p_batch
                      AND pg_sequence_last_value(current_setting('drainpipe.flow_budget_sequence.' || p_queue)::oid)
                          = current_setting('drainpipe.flow_budget_seen.' || p_queue)::bigint
                      AND pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue))
                      AND pg_sequence_last_value(current_setting('drainpipe.flow_budget_sequence.' || p_queue)::oid)
                          = current_setting('drainpipe.flow_budget_seen.' || p_queue)::bigint
                      AND set_config('drainpipe.flow_budget.' || p_queue,
                              (current_setting('drainpipe.flow_budget.' || p_queue)::bigint - p_batch)::text,
                              false) <> ''
                THEN p_batch END
           END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_take(p_flow drainpipe.queue_flow, p_batch integer)
 RETURNS integer LANGUAGE plpgsql AS $function$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_kept text := current_setting('drainpipe.flow_budget.' || p_flow.queue, true);
    v_locked boolean := coalesce(current_setting('drainpipe.flow_budget_locked.' || p_flow.queue, true) = 'on', false);
    v_epoch bigint;
    v_left bigint := 0;
    v_budget drainpipe.flow_budget;
    v_sequence regclass;
    v_now_at bigint;
    v_seen bigint;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) OR p_batch > 100 THEN
        -- the lock table is read only by a connection holding a chunk: a read of pg_locks
        -- costs a claim about 0.1 ms, and a queue with key limits never holds one
        IF NOT v_locked AND coalesce(v_kept, '') <> '' THEN
            v_locked := drainpipe.flow_budget_held(p_flow.queue);
        END IF;
        IF v_locked THEN
            -- other limits since the shared lock was taken: take nothing this time
            v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue, '-1', true);
            RETURN -1;
        END IF;
        IF coalesce(v_kept, '') <> '' AND NOT drainpipe.flow_budget_applies(p_flow) THEN
            -- a chunk of a budget the limits no longer have: never spent, so forgotten
            -- (else every claim of this session would read the lock table again)
            PERFORM drainpipe.flow_budget_keep(p_flow.queue, NULL, NULL, NULL, NULL);
        END IF;
        RETURN NULL;
    END IF;
    IF v_kept <> '' THEN
        v_epoch := current_setting('drainpipe.flow_budget_epoch.' || p_flow.queue)::bigint;
        v_left := v_kept::bigint;
    END IF;
    IF NOT v_locked THEN
        -- the first look, without a lock: is there a budget to take? (the session's chunk,
        -- or a chunk to take with another to spare, so that claims beside this one rarely
        -- spend the last before it locks). When there is, the same statement takes the
        -- shared lock: a try, so that it never waits inside a statement whose snapshot
        -- predates the lock
        SELECT CASE WHEN b.epoch IS NOT NULL AND b.concurrency = p_flow.concurrency
                         AND ((b.epoch = v_epoch AND v_left >= p_batch)
                              OR drainpipe.flow_budget_granted(b, c_chunk) + 2 * c_chunk <= b.cap)
                    THEN pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue))
               END
          INTO v_locked
          FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
        IF v_locked IS NULL THEN
            IF coalesce(v_kept, '') = '' THEN
                RETURN NULL;  -- no chunk, so no shared lock taken without a mark
            END IF;
            IF NOT drainpipe.flow_budget_held(p_flow.queue) THEN
                RETURN NULL;  -- no budget: the caller counts under the exclusive lock
            END IF;
            -- a claim of this transaction spent a chunk under the shared lock: on from here
        ELSIF NOT v_locked THEN
            -- a count holds the exclusive lock (or waits for it): after it
            PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
        END IF;
        v_kept := set_config('drainpipe.flow_budget_locked.' || p_flow.queue, 'on', true);
    END IF;
    -- under the lock, in statements that start after it: the epoch cannot change before
    -- this claim commits. The sequence first: a row stamped with it had no change pending
    v_sequence := drainpipe.flow_budget_sequence(p_flow.queue);
    IF v_sequence IS NOT NULL THEN
        v_now_at := pg_sequence_last_value(v_sequence);
    END IF;
    SELECT * INTO v_budget FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
    v_seen := CASE WHEN v_budget.stamp = v_now_at THEN v_now_at END;
    IF v_budget.epoch IS NOT NULL AND v_budget.concurrency = p_flow.concurrency THEN
        IF v_left >= p_batch AND v_budget.epoch = v_epoch THEN
            PERFORM drainpipe.flow_budget_keep(p_flow.queue, v_epoch, v_left - p_batch, v_seen, v_sequence);
            RETURN p_batch;
        END IF;
        -- a chunk of the open epoch: a nextval, so that claims beside this one never wait
        -- for each other (a row update would hold them until this claim commits)
        IF v_budget.granted + c_chunk * (nextval(v_budget.grants) - v_budget.grant_base) <= v_budget.cap THEN
            IF v_budget.epoch IS DISTINCT FROM v_epoch THEN
                v_left := 0;  -- what the session kept belongs to a closed epoch: never spent
            END IF;
            -- a chunk is at least 200, a budgeted batch at most 100
            PERFORM drainpipe.flow_budget_keep(p_flow.queue, v_budget.epoch, v_left + c_chunk - p_batch,
                                               v_seen, v_sequence);
            RETURN p_batch;
        END IF;
    END IF;
    -- spent (or closed) since the first look: close it, waiting for the claims doing the
    -- same (on the row), so that each counts what those before it leased; what the epoch
    -- handed out counts as leased too (claims in flight may spend it)
    UPDATE drainpipe.flow_budget b SET epoch = NULL WHERE b.queue = p_flow.queue
    RETURNING b.* INTO v_budget;
    PERFORM drainpipe.flow_budget_keep(p_flow.queue, NULL, NULL, NULL, NULL);
    v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue,
                         coalesce(drainpipe.flow_budget_granted(v_budget, c_chunk), -1)::text, true);
    RETURN -1;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_lease_upto(p_flow drainpipe.queue_flow, p_now timestamp with time zone)
 RETURNS timestamp with time zone LANGUAGE sql AS $function$
    -- where every lease of the queue ends, for its count (keep_flow_lease_window); a value
    -- in a variable, so that the count's index scan stops there (clock_timestamp() in the
    -- statement would be volatile, a filter)
    SELECT CASE WHEN p_flow.lease_window IS NULL THEN 'infinity'::timestamptz
                ELSE greatest(greatest(p_now, clock_timestamp()) + make_interval(secs => p_flow.lease_window),
                              p_flow.leases_end_by) END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_record_claims(p_flow drainpipe.queue_flow, p_keys text[], p_now timestamp with time zone)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_flow.rate_count IS NULL AND p_flow.key_rate_count IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM drainpipe.flow_claims c
     WHERE c.queue = p_flow.queue
       AND c.claimed_at <= p_now - make_interval(
               secs => greatest(coalesce(p_flow.rate_per, 0), coalesce(p_flow.key_rate_per, 0)));
    INSERT INTO drainpipe.flow_claims (queue, key, claimed_at)
    SELECT p_flow.queue, k, p_now FROM unnest(p_keys) AS k;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_room(p_flow drainpipe.queue_flow, p_batch integer, p_leased bigint, p_now timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql STABLE AS $function$
DECLARE
    v_room bigint := p_batch;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        v_room := least(v_room, p_flow.concurrency - p_leased);
    END IF;
    IF p_flow.rate_count IS NOT NULL AND v_room > 0 THEN
        v_room := least(v_room, p_flow.rate_count - (
            SELECT count(*) FROM drainpipe.flow_claims c
             WHERE c.queue = p_flow.queue
               AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per)));
    END IF;
    RETURN greatest(v_room, 0)::integer;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.forget_job_steps(p_queue text, p_ids bigint[])
 RETURNS void LANGUAGE sql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH steps_gone AS (
        DELETE FROM drainpipe.job_steps s WHERE s.queue = p_queue AND s.job_id = ANY (p_ids)
    )
    DELETE FROM drainpipe.job_workflows w WHERE w.queue = p_queue AND w.job_id = ANY (p_ids) $function$;

CREATE OR REPLACE FUNCTION drainpipe.get_job_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_get_job(p_queue, p_id, p_now) r)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.is_job_code(p_code text)
 RETURNS boolean LANGUAGE sql IMMUTABLE AS $function$
 SELECT p_code IS NOT NULL AND p_code ~ '^[A-Z][A-Z0-9_]{0,63}$' $function$;

CREATE OR REPLACE FUNCTION drainpipe.is_queue_name(p_queue text)
 RETURNS boolean LANGUAGE sql IMMUTABLE AS $function$
 SELECT p_queue IS NOT NULL AND p_queue ~ '^[a-z_][a-z0-9_]{0,46}$' $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_cause(p_queue text, p_id bigint)
 RETURNS text LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT a.code FROM drainpipe.job_attempts a
     WHERE a.queue = p_queue AND a.job_id = p_id AND a.code IS NOT NULL
     ORDER BY a.number DESC LIMIT 1 $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_causes_v1(p_queues text[], p_ids bigint[])
 RETURNS TABLE(queue text, id bigint, code text) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT j.queue, j.id, c.code
      FROM unnest(p_queues, p_ids) AS j(queue, id)
      CROSS JOIN LATERAL (
          SELECT a.code FROM drainpipe.job_attempts a
           WHERE a.queue = j.queue AND a.job_id = j.id AND a.code IS NOT NULL
           ORDER BY a.number DESC LIMIT 1
      ) c $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_holds_v1(p_queues text[], p_ids bigint[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(queue text, id bigint, held_by text) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_flow drainpipe.queue_flow;
BEGIN
    FOR v_flow IN SELECT f.* FROM drainpipe.queue_flow f WHERE f.queue = ANY (p_queues) LOOP
        RETURN QUERY
        SELECT v_flow.queue, x.id, x.held_by
          FROM drainpipe.job_flow_held(
                   v_flow,
                   ARRAY(SELECT w.id FROM unnest(p_queues, p_ids) AS w(queue, id)
                          WHERE w.queue = v_flow.queue),
                   v_now) x;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_history_v1(p_queue text, p_id bigint, p_attempts integer, p_state text, p_started_at timestamp with time zone, p_finished_at timestamp with time zone, p_lease_end timestamp with time zone, p_last_code text, p_now timestamp with time zone)
 RETURNS jsonb LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'number', g.n,
               'started_at', CASE WHEN a.number IS NOT NULL THEN a.started_at
                                  WHEN g.n = p_attempts THEN p_started_at END,
               'ended_at', CASE WHEN a.number IS NOT NULL THEN a.ended_at
                                WHEN g.n < p_attempts THEN NULL
                                WHEN p_state = 'succeeded' THEN p_finished_at
                                WHEN p_state = 'leased' AND p_lease_end <= p_now THEN p_lease_end END,
               'outcome', CASE WHEN a.number IS NOT NULL THEN a.outcome
                               WHEN g.n < p_attempts THEN 'expired'
                               WHEN p_state = 'succeeded' AND p_last_code IS NOT NULL THEN 'skipped'
                               WHEN p_state = 'succeeded' THEN 'succeeded'
                               WHEN p_state = 'leased' AND p_lease_end > p_now THEN 'running'
                               ELSE 'expired' END,
               'code', CASE WHEN a.number IS NOT NULL THEN a.code
                            WHEN g.n < p_attempts THEN 'LEASE_EXPIRED'
                            WHEN p_state = 'succeeded' THEN p_last_code
                            WHEN p_state = 'leased' AND p_lease_end > p_now THEN NULL
                            ELSE 'LEASE_EXPIRED' END,
               'late_outcome', a.late_outcome
           ) ORDER BY g.n), '[]'::jsonb)
      FROM generate_series(1, greatest(p_attempts, 0)) AS g(n)
      LEFT JOIN drainpipe.job_attempts a
        ON a.queue = p_queue AND a.job_id = p_id AND a.number = g.n $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_key(p_stored jsonb)
 RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $function$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}'
                THEN coalesce(p_stored ->> 'key', p_stored #>> '{context,tenant}') END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_message(p_payload jsonb, p_max_attempts integer, p_dedupe_key text)
 RETURNS jsonb LANGUAGE plpgsql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'payload', coalesce(p_payload, '{}'::jsonb),
        'max_attempts', p_max_attempts,
        'dedupe_key', p_dedupe_key
    )) || jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb));
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_priority(p_stored jsonb)
 RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $function$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}' AND jsonb_typeof(p_stored -> 'priority') = 'number'
                THEN greatest(-100, least(100, (p_stored ->> 'priority')::numeric::integer))
                ELSE 0 END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_holds_v1(p_queues text[])
 RETURNS TABLE(queue text, paused boolean, held jsonb) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_queue text;
    v_due bigint;
    v_flow drainpipe.queue_flow;
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        PERFORM drainpipe.assert_queue_name(v_queue);
        queue := v_queue;
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        held := '{}'::jsonb;
        IF paused THEN
            v_due := drainpipe.job_queue_due(v_queue, v_now);
            IF v_due > 0 THEN
                held := jsonb_build_object('paused', v_due);
            END IF;
        ELSE
            SELECT f.* INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = v_queue;
            IF FOUND THEN
                SELECT coalesce(jsonb_object_agg(h.held_by, h.n), '{}'::jsonb) INTO held
                  FROM (SELECT x.held_by, count(*) AS n
                          FROM drainpipe.job_flow_held(v_flow, NULL, v_now) x
                         GROUP BY x.held_by) h;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
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
        -- the live jobs, counted by the storage in one pass by minute enqueued: counts by
        -- state, the ready ones and the oldest of them, those enqueued in the last hour
        SELECT jsonb_build_object('queued', sum(g.queued), 'leased', sum(g.leased),
                                  'retry_wait', sum(g.retry_wait), 'dead', sum(g.dead)),
               coalesce(sum(g.ready), 0),
               extract(epoch FROM v_now - min(g.oldest))::double precision,
               coalesce(jsonb_object_agg(extract(epoch FROM g.minute)::bigint::text, g.n)
                            FILTER (WHERE g.minute IS NOT NULL), '{}'::jsonb)
          INTO v_live, ready, oldest_ready_age_s, v_enqueued
          FROM drainpipe.live_jobs_by_minute(v_queue, v_now, v_from) g;
        SELECT f.totals, f.enqueued, f.succeeded INTO v_done, v_enqueued_done, v_succeeded
          FROM drainpipe.finished_jobs_by_minute(v_queue, v_from) f;
        -- dead from the live rows (a last lease that ran out) adds to the finished dead
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', coalesce((v_done ->> 'succeeded')::bigint, 0),
            'dead', coalesce((v_done ->> 'dead')::bigint, 0) + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', coalesce((v_done ->> 'cancelled')::bigint, 0));
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_enqueued_done, v_succeeded);
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        RETURN NEXT;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v4(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v4 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.succeeded, s.cancelled,
           s.oldest_age_seconds, s.paused,
           CASE WHEN s.paused THEN
                    CASE WHEN s.ready > 0 THEN jsonb_build_object('paused', s.ready)
                         ELSE '{}'::jsonb END
                WHEN s.ready = 0 THEN '{}'::jsonb
                ELSE coalesce((
                    SELECT jsonb_object_agg(h.held_by, h.n)
                      FROM (SELECT x.held_by, count(*) AS n
                              FROM drainpipe.queue_flow f
                             CROSS JOIN LATERAL drainpipe.job_flow_held(f, NULL, clock_timestamp()) x
                             WHERE f.queue = s.queue
                             GROUP BY x.held_by) h), '{}'::jsonb)
           END
      FROM (SELECT c.*, EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = c.queue) AS paused
              FROM drainpipe.job_queue_stats_v2(p_queues) c) s $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_result_v1(p_queue text, p_id bigint)
 RETURNS TABLE(kept boolean, result jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT count(s.*) > 0, (array_agg(s.result))[1] FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = 0 $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_retry_delay(p_attempt integer)
 RETURNS double precision LANGUAGE sql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT 1 + floor(random() * least(3600, 10 * power(2, least(greatest(p_attempt, 1) - 1, 20)))) $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_stamp(p_sequence regclass)
 RETURNS drainpipe.job_stamp_v1 LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_before timestamptz;
    v_stamp drainpipe.job_stamp_v1;
BEGIN
    LOOP
        -- one statement, planned before it runs: nothing but the draw between the reads
        SELECT clock_timestamp(), nextval(p_sequence), clock_timestamp()
          INTO v_before, v_stamp.id, v_stamp.at;
        -- (a clock stepped back reads as no time at all: the id is kept)
        EXIT WHEN v_stamp.at - v_before <= drainpipe.job_stamp_window();
    END LOOP;
    RETURN v_stamp;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_stamp_window()
 RETURNS interval LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
 SELECT interval '1 millisecond' $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_state_at(p_state text, p_lease_end timestamp with time zone, p_attempts integer, p_max_attempts integer, p_now timestamp with time zone)
 RETURNS text LANGUAGE sql IMMUTABLE AS $function$
    SELECT CASE WHEN p_state = 'leased' AND p_lease_end <= p_now
                THEN CASE WHEN p_attempts >= p_max_attempts THEN 'dead' ELSE 'retry_wait' END
                ELSE p_state END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_steps_v1(p_queue text, p_id bigint)
 RETURNS TABLE(number integer, name text, state text, result jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT s.number, s.name, s.state, s.result FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number > 0
     ORDER BY s.number $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_tenant(p_stored jsonb)
 RETURNS text LANGUAGE sql IMMUTABLE AS $function$
 SELECT CASE WHEN p_stored @> '{"$dp": 1}' THEN p_stored #>> '{context,tenant}' END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_workflow_v1(p_queue text, p_id bigint)
 RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE WHEN w.job_id IS NULL AND s.steps IS NULL THEN NULL ELSE jsonb_build_object(
               'suspensions', coalesce(w.suspensions, 0),
               'last_fence', w.last_fence,
               'waiting_for', w.waiting_for,
               'steps', coalesce(s.steps, '[]'::jsonb)) END
      FROM (SELECT 1) one
      LEFT JOIN drainpipe.job_workflows w ON w.queue = p_queue AND w.job_id = p_id
      LEFT JOIN LATERAL (
          SELECT jsonb_agg(jsonb_build_object(
                     'number', x.number, 'name', x.name, 'state', x.state,
                     'started_at', x.started_at, 'ended_at', x.ended_at, 'code', x.code)
                   ORDER BY x.number) AS steps
            FROM drainpipe.job_steps x
           WHERE x.queue = p_queue AND x.job_id = p_id AND x.number > 0
      ) s ON true $function$;

CREATE OR REPLACE FUNCTION drainpipe.join_jobs_v1(p_queue text, p_id bigint, p_attempt integer, p_child_queue text, p_ids bigint[], p_number integer, p_name text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_since timestamptz;
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    IF EXISTS (SELECT 1 FROM drainpipe.child_job_states(p_child_queue, p_ids) c WHERE c.state = 'live') THEN
        INSERT INTO drainpipe.job_workflows AS w
               (queue, job_id, suspensions, last_fence, waiting_for, wait_number, waiting_since, updated_at)
        VALUES (p_queue, p_id, 1, p_attempt, 'children', p_number, v_now, v_now)
        ON CONFLICT (queue, job_id) DO UPDATE
           SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
               waiting_for = 'children', wait_number = excluded.wait_number,
               wait_event = NULL, wait_key = NULL, wait_deadline = NULL,
               -- the same join waiting again keeps its start; any other wait starts now
               waiting_since = CASE
                   WHEN w.waiting_for = 'children' AND w.wait_number = excluded.wait_number
                   THEN coalesce(w.waiting_since, v_now) ELSE v_now END,
               updated_at = v_now
        RETURNING w.waiting_since INTO v_since;
        PERFORM drainpipe.park_job(p_queue, p_id,
            v_now + make_interval(secs => least(60, greatest(2,
                extract(epoch FROM v_now - v_since)::double precision / 2))), 'children');
        RETURN 'suspended';
    END IF;
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, 'done',
            jsonb_build_object('queue', p_child_queue, 'ids', to_jsonb(p_ids)),
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, ended_at = excluded.ended_at
     WHERE s.state = 'failed' AND s.name = excluded.name;
    IF NOT FOUND THEN
        RETURN 'mismatch';
    END IF;
    UPDATE drainpipe.job_workflows
       SET waiting_for = NULL, wait_number = NULL, waiting_since = NULL, updated_at = v_now
     WHERE queue = p_queue AND job_id = p_id;
    RETURN 'done';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.keep_claim_bound(p_queue text, p_first timestamp with time zone, p_now timestamp with time zone)
 RETURNS timestamp with time zone LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_first IS NOT NULL AND p_now IS NULL AND isfinite(p_first) THEN
        PERFORM set_config('drainpipe.claim_from.' || p_queue,
                           (extract(epoch FROM p_first) * 1000000)::bigint::text, false);
    END IF;
    RETURN p_first;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.keep_flow_lease_window(p_queue text, p_latest_sql text)
 RETURNS void LANGUAGE plpgsql AS $function$
DECLARE
    v_window double precision;
    v_end_by timestamptz;
    v_max double precision;
BEGIN
    -- A queue with a policy holds every lease to max_lease (+1 s of slack), so its count of
    -- leases reads the due times up to lease_window seconds from now, or up to
    -- leases_end_by when that is later: the end of every lease granted before the bound
    -- (flow_lease_upto). NULL: no bound.
    SELECT f.lease_window, f.leases_end_by, p.max_lease INTO v_window, v_end_by, v_max
      FROM drainpipe.queue_flow f LEFT JOIN drainpipe.queue_policies p ON p.queue = f.queue
     WHERE f.queue = p_queue;
    IF v_max IS NULL THEN
        v_end_by := NULL;
    ELSIF v_window IS NULL THEN
        -- the first window: a lease granted before the policy (or before these limits) may
        -- end later; the storage's latest lease end past the bound (p_latest_sql: after $1,
        -- of queue $2). Read once: the next ensure_policies() reads no jobs
        EXECUTE p_latest_sql INTO v_end_by USING clock_timestamp() + make_interval(secs => v_max + 1), p_queue;
    ELSIF v_max + 1 < v_window THEN
        -- a shorter max_lease: every lease granted under the longer one, a claim's still in
        -- flight included, ends within the old window from now
        v_end_by := greatest(v_end_by, clock_timestamp() + make_interval(secs => v_window + 1));
    END IF;
    UPDATE drainpipe.queue_flow f SET lease_window = v_max + 1, leases_end_by = v_end_by
     WHERE f.queue = p_queue
       AND (f.lease_window, f.leases_end_by) IS DISTINCT FROM (v_max + 1, v_end_by);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.kept_job_totals(p_queue text)
 RETURNS jsonb LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM drainpipe.job_totals_kept k WHERE k.queue = p_queue)
                THEN coalesce((SELECT jsonb_object_agg(s.state, s.n)
                                 FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                                        WHERE t.queue = p_queue GROUP BY t.state) s), '{}'::jsonb)
           END $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v2(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_list_jobs_2(p_queue, p_state, p_tenant, p_limit,
                                                      p_before_at, p_before_id, p_before_queue,
                                                      p_now) r)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_management_audit_v2(p_target text, p_limit integer, p_before bigint DEFAULT NULL::bigint)
 RETURNS TABLE(id bigint, at timestamp with time zone, actor text, action text, queue text, job_id bigint, outcome text, code text, idempotency_key text, new_job_id bigint, detail jsonb) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT a.id, a.at, a.actor, a.action, a.queue, a.job_id, a.outcome, a.code,
           a.idempotency_key, a.new_job_id, a.detail
      FROM drainpipe.management_audit AS a
     WHERE a.target = p_target AND (p_before IS NULL OR a.id < p_before)
     ORDER BY a.id DESC
     LIMIT least(greatest(p_limit, 1), 501) $function$;

CREATE OR REPLACE FUNCTION drainpipe.lock_job_event(p_event text, p_key text)
 RETURNS void LANGUAGE sql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT pg_advisory_xact_lock(hashtextextended('drainpipe.event:' || p_event || chr(1) || p_key, 0)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.note_job_priorities(p_queue text, p_stored jsonb)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_level integer;
BEGIN
    FOR v_level IN
        SELECT DISTINCT drainpipe.job_priority(e.value)
          FROM jsonb_array_elements(p_stored) e
         WHERE jsonb_typeof(e.value) = 'object' AND e.value ? 'priority'
    LOOP
        IF v_level <> 0 THEN
            PERFORM drainpipe.note_job_priority(p_queue, v_level);
        END IF;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.note_job_priority(p_queue text, p_level integer)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_level IS NULL OR EXISTS (SELECT 1 FROM drainpipe.queue_priorities p
                                   WHERE p.queue = p_queue AND p_level = ANY (p.levels)) THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        PERFORM drainpipe.ensure_priority_claim(p_queue);
    END IF;
    INSERT INTO drainpipe.queue_priorities AS p (queue, levels)
    VALUES (p_queue, ARRAY(SELECT DISTINCT l FROM unnest(ARRAY[0, p_level]) l ORDER BY l DESC))
    ON CONFLICT (queue) DO UPDATE
       SET levels = ARRAY(SELECT DISTINCT l FROM unnest(p.levels || excluded.levels) l
                           ORDER BY l DESC);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.overview_minutes(p_now timestamp with time zone)
 RETURNS SETOF timestamp with time zone LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT generate_series(date_trunc('minute', p_now) - interval '59 minutes',
                           date_trunc('minute', p_now), interval '1 minute') $function$;

CREATE OR REPLACE FUNCTION drainpipe.overview_series(p_queue text, p_now timestamp with time zone, p_enqueued_live jsonb, p_enqueued_done jsonb, p_succeeded jsonb)
 RETURNS jsonb LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH failed AS (
        SELECT date_trunc('minute', a.ended_at) AS minute, count(*) AS n
          FROM drainpipe.job_attempts a
         WHERE a.queue = p_queue AND a.outcome IN ('failed', 'discarded', 'expired')
           AND a.ended_at >= date_trunc('minute', p_now) - interval '59 minutes'
         GROUP BY 1
    )
    SELECT jsonb_agg(jsonb_build_object(
               'minute', m.minute,
               'enqueued', coalesce((p_enqueued_live ->> m.k)::bigint, 0)
                           + coalesce((p_enqueued_done ->> m.k)::bigint, 0),
               'succeeded', coalesce((p_succeeded ->> m.k)::bigint, 0),
               'failed', coalesce(f.n, 0)) ORDER BY m.minute)
      FROM (SELECT o.minute, extract(epoch FROM o.minute)::bigint::text AS k
              FROM drainpipe.overview_minutes(p_now) AS o(minute)) m
      LEFT JOIN failed f ON f.minute = m.minute $function$;

CREATE OR REPLACE FUNCTION drainpipe.pause_queue_v1(p_queue text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_added integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_pauses (queue, paused_at)
    VALUES (p_queue, coalesce(p_now, clock_timestamp()))
    ON CONFLICT (queue) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    RETURN v_added > 0;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.paused_queues_v1(p_queues text[] DEFAULT NULL::text[])
 RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT p.queue FROM drainpipe.queue_pauses p
     WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
     ORDER BY p.queue $function$;

CREATE OR REPLACE FUNCTION drainpipe.policy_payload_limit(p_policy drainpipe.queue_policies)
 RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE WHEN p_policy.encrypt
                THEN ((p_policy.max_payload_bytes + 1024) * 4 / 3)::bigint + 64
                ELSE (p_policy.max_payload_bytes * 3 / 2)::bigint END $function$;

CREATE OR REPLACE FUNCTION drainpipe.policy_payload_size(p_stored jsonb)
 RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE
        WHEN jsonb_typeof(p_stored) <> 'object' OR NOT p_stored ? '$dp' THEN octet_length(p_stored::text)
        WHEN p_stored ? 'sealed' THEN octet_length(p_stored ->> 'sealed')
        WHEN p_stored ? 'payload' THEN octet_length((p_stored -> 'payload')::text)
        ELSE octet_length(p_stored::text) END $function$;

CREATE OR REPLACE FUNCTION drainpipe.priority_bound_name(p_queue text, p_level integer)
 RETURNS text LANGUAGE sql IMMUTABLE AS $function$
    SELECT p_queue || CASE WHEN p_level < 0 THEN '__pm' ELSE '__p' END || abs(p_level)::text $function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive_v1(p_queue text, p_older_than interval DEFAULT '7 days'::interval, p_batch integer DEFAULT 10000, p_dead_older_than interval DEFAULT '30 days'::interval)
 RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_ids bigint[];
BEGIN
    v_ids := drainpipe.delete_finished_jobs(p_queue, clock_timestamp() - p_older_than,
                                            clock_timestamp() - p_dead_older_than, p_batch);
    PERFORM drainpipe.forget_job_steps(p_queue, v_ids);
    RETURN cardinality(v_ids);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_job_events_v1(p_older_than double precision DEFAULT 604800, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH gone AS (
        DELETE FROM drainpipe.job_events
         WHERE emitted_at < coalesce(p_now, clock_timestamp()) - make_interval(secs => p_older_than)
        RETURNING 1
    )
    SELECT count(*) FROM gone $function$;

CREATE OR REPLACE FUNCTION drainpipe.record_job_step_v1(p_queue text, p_id bigint, p_attempt integer, p_number integer, p_name text, p_state text, p_result jsonb, p_code text DEFAULT NULL::text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_name text;
BEGIN
    IF p_state NOT IN ('done', 'failed') THEN
        RAISE EXCEPTION 'step state must be done or failed' USING ERRCODE = '22023';
    END IF;
    IF p_number IS NULL OR p_number < 0 OR p_name IS NULL OR length(p_name) = 0 OR length(p_name) > 200 THEN
        RAISE EXCEPTION 'a step needs a number >= 0 and a name of 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, code, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, p_state,
            CASE WHEN p_state = 'done' THEN p_result END,
            CASE WHEN drainpipe.is_job_code(p_code) THEN p_code END,
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, code = excluded.code,
           started_at = excluded.started_at, ended_at = excluded.ended_at
     WHERE s.state = 'failed' AND s.name = excluded.name;
    IF FOUND THEN
        RETURN 'recorded';
    END IF;
    SELECT s.name INTO v_name FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
    RETURN CASE WHEN v_name = p_name THEN 'exists' ELSE 'mismatch' END;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.refused_turn_rows(p_ids bigint[], p_attempts integer[], p_done bigint[])
 RETURNS SETOF drainpipe.job_turn_row_v1 LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT f.id, f.attempt, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
           NULL::integer, NULL::text, true
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE f.id <> ALL (coalesce(p_done, '{}'::bigint[])) $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_refusal(p_replay_window double precision, p_replayable boolean, p_origin timestamp with time zone, p_now timestamp with time zone)
 RETURNS text LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE
        WHEN NOT coalesce(p_replayable, true) THEN 'REPLAY_BLOCKED'
        WHEN p_replay_window IS NOT NULL AND p_origin IS NOT NULL
             AND p_origin < p_now - make_interval(secs => p_replay_window) THEN 'EVENT_EXPIRED'
    END $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_rules_in_force(p_queue text, p_window double precision, p_replayable boolean, OUT replay_window double precision, OUT replayable boolean)
 RETURNS record LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_window double precision;
    v_replayable boolean;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    SELECT p.replay_window, p.replayable INTO v_window, v_replayable
      FROM drainpipe.queue_policies AS p WHERE p.queue = p_queue FOR SHARE;
    replayable := coalesce(v_replayable, true) AND coalesce(p_replayable, true);
    replay_window := CASE WHEN v_window IS NULL THEN p_window
                          WHEN p_window IS NULL THEN v_window
                          ELSE least(v_window, p_window) END;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.resume_queue_v1(p_queue text)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_removed integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    DELETE FROM drainpipe.queue_pauses WHERE queue = p_queue;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed > 0;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs_v2(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_batch integer DEFAULT 1000, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(job_id bigint, new_job_id bigint, code text) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_ids bigint[];
    v_id bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_ids IS NULL THEN
        v_ids := ARRAY(SELECT drainpipe.dead_job_ids(p_queue, NULL, p_batch));
    ELSE
        v_ids := ARRAY(SELECT DISTINCT i FROM unnest(p_ids) AS i WHERE i IS NOT NULL
                        ORDER BY i DESC LIMIT greatest(coalesce(p_batch, 1000), 1));
    END IF;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT r.new_job_id, r.code INTO new_job_id, code
          FROM drainpipe.replay_dead_job_v3(p_queue, v_id, p_window, p_replayable, p_now) AS r;
        job_id := v_id;
        RETURN NEXT;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.search_jobs_v1(p_queue text, p_state text, p_tenant text, p_code text, p_since timestamp with time zone, p_until timestamp with time zone, p_dedupe_key text, p_id bigint, p_limit integer, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_search_jobs(p_queue, p_state, p_tenant, p_code, p_since,
                                                      p_until, p_dedupe_key, p_id, p_limit,
                                                      p_before_id, p_before_queue, p_now) r)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.spawn_jobs_v1(p_queue text, p_id bigint, p_attempt integer, p_number integer, p_name text, p_child_queue text, p_payloads jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, ids bigint[]) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_step drainpipe.job_steps;
    v_ids bigint[];
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN QUERY SELECT 'lost'::text, NULL::bigint[];
        RETURN;
    END IF;
    SELECT * INTO v_step FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
    IF FOUND AND v_step.name IS DISTINCT FROM p_name THEN
        RETURN QUERY SELECT 'mismatch'::text, NULL::bigint[];
        RETURN;
    ELSIF FOUND AND v_step.state = 'done' THEN
        RETURN QUERY SELECT 'exists'::text,
            ARRAY(SELECT jsonb_array_elements_text(v_step.result -> 'ids')::bigint);
        RETURN;
    END IF;
    v_ids := ARRAY(SELECT drainpipe.enqueue_jobs_v1(p_child_queue, p_payloads, p_delay, p_max_attempts));
    PERFORM drainpipe.set_job_parent(p_child_queue, v_ids, p_id);
    INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, started_at, ended_at)
    VALUES (p_queue, p_id, p_number, p_name, 'done',
            jsonb_build_object('queue', p_child_queue, 'ids', to_jsonb(v_ids)),
            coalesce(p_started_at, v_now), v_now)
    ON CONFLICT (queue, job_id, number) DO UPDATE
       SET state = excluded.state, result = excluded.result, ended_at = excluded.ended_at;
    RETURN QUERY SELECT 'recorded'::text, v_ids;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.suspend_job_v1(p_queue text, p_id bigint, p_attempt integer, p_delay double precision, p_waiting_for text DEFAULT NULL::text, p_number integer DEFAULT NULL::integer, p_name text DEFAULT NULL::text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_until timestamptz := v_now + make_interval(secs => greatest(coalesce(p_delay, 0), 0));
    v_name text;
BEGIN
    IF drainpipe.hold_job_fence(p_queue, p_id, p_attempt) IS NULL THEN
        RETURN 'lost';
    END IF;
    IF p_number IS NOT NULL THEN
        INSERT INTO drainpipe.job_steps (queue, job_id, number, name, state, result, started_at, ended_at)
        VALUES (p_queue, p_id, p_number, p_name, 'done', jsonb_build_object('until', v_until),
                coalesce(p_started_at, v_now), v_now)
        ON CONFLICT (queue, job_id, number) DO NOTHING;
        IF NOT FOUND THEN
            SELECT s.name INTO v_name FROM drainpipe.job_steps s
             WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = p_number;
            IF v_name IS DISTINCT FROM p_name THEN
                RETURN 'mismatch';
            END IF;
        END IF;
    END IF;
    INSERT INTO drainpipe.job_workflows AS w (queue, job_id, suspensions, last_fence, waiting_for, updated_at)
    VALUES (p_queue, p_id, 1, p_attempt, p_waiting_for, v_now)
    ON CONFLICT (queue, job_id) DO UPDATE
       SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
           waiting_for = excluded.waiting_for,
           wait_number = NULL, wait_event = NULL, wait_key = NULL, wait_deadline = NULL,
           updated_at = v_now;
    PERFORM drainpipe.park_job(p_queue, p_id, v_until, p_waiting_for);
    RETURN 'suspended';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.wait_job_event_v1(p_queue text, p_id bigint, p_attempt integer, p_event text, p_key text, p_timeout double precision, p_number integer, p_name text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, data jsonb) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_enqueued timestamptz;
    v_event_id bigint;
    v_data jsonb;
    v_deadline timestamptz;
BEGIN
    PERFORM drainpipe.assert_event_name(p_event, p_key);
    -- the event lock before the job's row, as emit takes them: no deadlock between the two
    PERFORM drainpipe.lock_job_event(p_event, p_key);
    v_enqueued := drainpipe.hold_job_fence(p_queue, p_id, p_attempt);
    IF v_enqueued IS NULL THEN
        RETURN QUERY SELECT 'lost'::text, NULL::jsonb;
        RETURN;
    END IF;
    SELECT e.id, e.data INTO v_event_id, v_data
      FROM drainpipe.job_events e
     WHERE e.name = p_event AND e.key = p_key AND e.emitted_at >= v_enqueued
       AND NOT EXISTS (SELECT 1 FROM drainpipe.job_steps s
                        WHERE s.queue = p_queue AND s.job_id = p_id AND s.event_id = e.id)
     ORDER BY e.id
     LIMIT 1;
    SELECT w.wait_deadline INTO v_deadline FROM drainpipe.job_workflows w
     WHERE w.queue = p_queue AND w.job_id = p_id AND w.wait_number = p_number;
    IF NOT FOUND THEN
        v_deadline := v_now + make_interval(secs => p_timeout);  -- NULL without a timeout
    END IF;
    IF v_event_id IS NOT NULL OR v_deadline <= v_now THEN
        INSERT INTO drainpipe.job_steps AS s (queue, job_id, number, name, state, result, event_id, started_at, ended_at)
        VALUES (p_queue, p_id, p_number, p_name, 'done',
                jsonb_build_object('data', v_data, 'timeout', v_event_id IS NULL), v_event_id,
                coalesce(p_started_at, v_now), v_now)
        ON CONFLICT (queue, job_id, number) DO UPDATE
           SET state = excluded.state, result = excluded.result, event_id = excluded.event_id,
               ended_at = excluded.ended_at
         WHERE s.state = 'failed' AND s.name = excluded.name;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'mismatch'::text, NULL::jsonb;
            RETURN;
        END IF;
        UPDATE drainpipe.job_workflows
           SET waiting_for = NULL, wait_number = NULL, wait_event = NULL, wait_key = NULL,
               wait_deadline = NULL, updated_at = v_now
         WHERE queue = p_queue AND job_id = p_id AND wait_number IS NOT NULL;
        RETURN QUERY SELECT CASE WHEN v_event_id IS NULL THEN 'timeout' ELSE 'taken' END, v_data;
        RETURN;
    END IF;
    INSERT INTO drainpipe.job_workflows AS w
           (queue, job_id, suspensions, last_fence, waiting_for, wait_number, wait_event, wait_key,
            wait_deadline, updated_at)
    VALUES (p_queue, p_id, 1, p_attempt, 'event:' || p_event, p_number, p_event, p_key, v_deadline, v_now)
    ON CONFLICT (queue, job_id) DO UPDATE
       SET suspensions = w.suspensions + 1, last_fence = excluded.last_fence,
           waiting_for = excluded.waiting_for,
           wait_number = excluded.wait_number, wait_event = excluded.wait_event,
           wait_key = excluded.wait_key, wait_deadline = excluded.wait_deadline,
           updated_at = v_now;
    -- without a timeout the job is eligible only when an emit wakes it (a century is "never"
    -- that a timestamp can still carry to every client)
    PERFORM drainpipe.park_job(p_queue, p_id, coalesce(v_deadline, v_now + interval '100 years'),
                               'event:' || p_event);
    RETURN QUERY SELECT 'suspended'::text, NULL::jsonb;
END $function$;

RESET check_function_bodies;
