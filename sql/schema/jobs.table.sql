-- drainpipe's jobs module on the table storage: the schema a fresh install leaves today.
-- Generated from sql/migrations/jobs/ by ./scripts/schema; for
-- reading only (install and upgrade run the migrations). Change the schema with a new
-- migration, then regenerate: tests/sql/test_current_schema.py compares the two.


-- Row types

CREATE TYPE drainpipe.dead_job_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, died_at timestamp with time zone, message jsonb);

CREATE TYPE drainpipe.job_queue_stats_v1 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, oldest_age_seconds double precision);

CREATE TYPE drainpipe.job_queue_stats_v2 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, succeeded bigint, cancelled bigint, oldest_age_seconds double precision);

CREATE TYPE drainpipe.job_queue_stats_v3 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, succeeded bigint, cancelled bigint, oldest_age_seconds double precision, paused boolean);

CREATE TYPE drainpipe.job_queue_stats_v4 AS (queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint, succeeded bigint, cancelled bigint, oldest_age_seconds double precision, paused boolean, held jsonb);

CREATE TYPE drainpipe.job_record_v1 AS (id bigint, queue text, state text, attempts integer, max_attempts integer, deadline timestamp with time zone, tenant text, dedupe_key text, enqueued_at timestamp with time zone, eligible_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, last_code text, parent_id bigint, replayed_by bigint, history jsonb);

CREATE TYPE drainpipe.job_row_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, visible_until timestamp with time zone, payload jsonb, max_attempts integer, last_error text);

CREATE TYPE drainpipe.job_stamp_v1 AS (id bigint, at timestamp with time zone);

CREATE TYPE drainpipe.job_turn_row_v1 AS (id bigint, attempts integer, enqueued_at timestamp with time zone, visible_until timestamp with time zone, payload jsonb, max_attempts integer, last_error text, refused boolean);

CREATE TYPE drainpipe.schedule_claim_v1 AS (name text, cron text, time_zone text, queue text, payload jsonb, next_run timestamp with time zone, first_after timestamp with time zone, claim_token uuid);

CREATE TYPE drainpipe.schedule_entry_v1 AS (name text, cron text, time_zone text, queue text, tenant text, next_run timestamp with time zone, last_run timestamp with time zone, leased_until timestamp with time zone, created_at timestamp with time zone);


-- Tables, with their constraints, indexes and triggers

CREATE TABLE drainpipe.flow_budget (
    queue text NOT NULL,
    epoch bigint,
    concurrency integer NOT NULL,
    cap bigint NOT NULL,
    granted bigint NOT NULL,
    stamp bigint
);
ALTER TABLE drainpipe.flow_budget ADD CONSTRAINT flow_budget_pkey PRIMARY KEY (queue);

CREATE TABLE drainpipe.flow_claims (
    queue text NOT NULL,
    key text,
    claimed_at timestamp with time zone NOT NULL
);
CREATE INDEX flow_claims_key_idx ON drainpipe.flow_claims USING btree (queue, key, claimed_at) WHERE (key IS NOT NULL);
CREATE INDEX flow_claims_queue_idx ON drainpipe.flow_claims USING btree (queue, claimed_at);

CREATE TABLE drainpipe.flow_enqueues (
    queue text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    accepted_at timestamp with time zone NOT NULL
);
ALTER TABLE drainpipe.flow_enqueues ADD CONSTRAINT flow_enqueues_pkey PRIMARY KEY (queue, key);

CREATE TABLE drainpipe.job_attempts (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    started_at timestamp with time zone,
    ended_at timestamp with time zone,
    outcome text NOT NULL,
    code text,
    late_outcome text
);
ALTER TABLE drainpipe.job_attempts ADD CONSTRAINT job_attempts_pkey PRIMARY KEY (queue, job_id, number);
CREATE INDEX job_attempts_failed_idx ON drainpipe.job_attempts USING btree (queue, ended_at) WHERE (outcome = ANY (ARRAY['failed'::text, 'discarded'::text, 'expired'::text]));

CREATE TABLE drainpipe.job_dead_letters (
    id bigint NOT NULL,
    queue text NOT NULL,
    message jsonb NOT NULL,
    attempts integer NOT NULL,
    enqueued_at timestamp with time zone NOT NULL,
    died_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);
ALTER TABLE drainpipe.job_dead_letters ADD CONSTRAINT job_dead_letters_pkey PRIMARY KEY (id);
CREATE INDEX job_dead_letters_died_brin ON drainpipe.job_dead_letters USING brin (died_at);
CREATE INDEX job_dead_letters_queue_idx ON drainpipe.job_dead_letters USING btree (queue, id);

CREATE TABLE drainpipe.job_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    key text NOT NULL,
    data jsonb,
    emitted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);
ALTER TABLE drainpipe.job_events ADD CONSTRAINT job_events_pkey PRIMARY KEY (id);
CREATE INDEX job_events_emitted_brin ON drainpipe.job_events USING brin (emitted_at);
CREATE INDEX job_events_match_idx ON drainpipe.job_events USING btree (name, key, id);

CREATE TABLE drainpipe.job_messages (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    queue text NOT NULL,
    payload jsonb NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    dedupe_key text,
    last_error text,
    enqueued_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    visible_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    state text DEFAULT 'queued'::text NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    last_code text,
    parent_id bigint,
    replayed_by bigint
);
ALTER TABLE drainpipe.job_messages ADD CONSTRAINT job_messages_pkey PRIMARY KEY (id);
CREATE INDEX job_messages_dead_idx ON drainpipe.job_messages USING btree (queue, id) WHERE ((state = 'dead'::text) AND (replayed_by IS NULL));
CREATE INDEX job_messages_exhausted_live_idx ON drainpipe.job_messages USING btree (queue, visible_at) WHERE ((finished_at IS NULL) AND (attempts >= max_attempts));
CREATE INDEX job_messages_finished_idx ON drainpipe.job_messages USING btree (queue, finished_at) INCLUDE (state) WHERE (finished_at IS NOT NULL);
CREATE INDEX job_messages_live_idx ON drainpipe.job_messages USING btree (queue, visible_at, id) WHERE (finished_at IS NULL);
CREATE INDEX job_messages_live_key_idx ON drainpipe.job_messages USING btree (queue, dedupe_key) WHERE ((dedupe_key IS NOT NULL) AND (finished_at IS NULL));
CREATE UNIQUE INDEX job_messages_waiting_key_idx ON drainpipe.job_messages USING btree (queue, dedupe_key) WHERE ((dedupe_key IS NOT NULL) AND (attempts = 0) AND (finished_at IS NULL));
CREATE TRIGGER drainpipe_totals_delete AFTER DELETE ON drainpipe.job_messages REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();
CREATE TRIGGER drainpipe_totals_update AFTER UPDATE ON drainpipe.job_messages REFERENCING OLD TABLE AS gone NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();
ALTER TABLE drainpipe.job_messages SET (autovacuum_vacuum_scale_factor=0);
ALTER TABLE drainpipe.job_messages SET (autovacuum_vacuum_threshold=5000);
ALTER TABLE drainpipe.job_messages SET (vacuum_index_cleanup=on);

CREATE TABLE drainpipe.job_retention_runs (
    id integer NOT NULL,
    last_run timestamp with time zone
);
ALTER TABLE drainpipe.job_retention_runs ADD CONSTRAINT job_retention_runs_id_check CHECK ((id = 1));
ALTER TABLE drainpipe.job_retention_runs ADD CONSTRAINT job_retention_runs_pkey PRIMARY KEY (id);

CREATE TABLE drainpipe.job_schedules (
    name text NOT NULL,
    cron text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    queue text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    tenant text,
    next_run timestamp with time zone,
    last_run timestamp with time zone,
    locked_until timestamp with time zone,
    claim_token uuid,
    first_after timestamp with time zone,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    due_at timestamp with time zone GENERATED ALWAYS AS (COALESCE(next_run, '-infinity'::timestamp with time zone)) STORED
);
ALTER TABLE drainpipe.job_schedules ADD CONSTRAINT job_schedules_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200)));
ALTER TABLE drainpipe.job_schedules ADD CONSTRAINT job_schedules_pkey PRIMARY KEY (name);
ALTER TABLE drainpipe.job_schedules ADD CONSTRAINT job_schedules_queue_name CHECK ((queue ~ '^[a-z_][a-z0-9_]{0,46}$'::text));
CREATE INDEX job_schedules_due_idx ON drainpipe.job_schedules USING btree (due_at, name);
CREATE INDEX job_schedules_tenant_idx ON drainpipe.job_schedules USING btree (tenant, name) WHERE (tenant IS NOT NULL);

CREATE TABLE drainpipe.job_steps (
    queue text NOT NULL,
    job_id bigint NOT NULL,
    number integer NOT NULL,
    name text NOT NULL,
    state text NOT NULL,
    result jsonb,
    event_id bigint,
    code text,
    started_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone NOT NULL
);
ALTER TABLE drainpipe.job_steps ADD CONSTRAINT job_steps_pkey PRIMARY KEY (queue, job_id, number);

CREATE TABLE drainpipe.job_totals (
    queue text NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL
);
ALTER TABLE drainpipe.job_totals ADD CONSTRAINT job_totals_pkey PRIMARY KEY (queue, state, shard);

CREATE TABLE drainpipe.job_totals_kept (
    queue text NOT NULL
);
ALTER TABLE drainpipe.job_totals_kept ADD CONSTRAINT job_totals_kept_pkey PRIMARY KEY (queue);

CREATE TABLE drainpipe.job_workflows (
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
    waiting_since timestamp with time zone
);
ALTER TABLE drainpipe.job_workflows ADD CONSTRAINT job_workflows_pkey PRIMARY KEY (queue, job_id);
CREATE INDEX job_workflows_waiting_idx ON drainpipe.job_workflows USING btree (wait_event, wait_key) WHERE (wait_event IS NOT NULL);

CREATE TABLE drainpipe.known_time_zones (
    name text NOT NULL
);
ALTER TABLE drainpipe.known_time_zones ADD CONSTRAINT known_time_zones_pkey PRIMARY KEY (name);

CREATE TABLE drainpipe.management_audit (
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
    detail jsonb
);
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_action_check CHECK ((action = ANY (ARRAY['cancel'::text, 'replay'::text, 'pause'::text, 'resume'::text, 'bulk_cancel'::text, 'bulk_replay'::text])));
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200)));
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_code_check CHECK ((code ~ '^[A-Z][A-Z0-9_]{0,63}$'::text));
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_idempotency_key_check CHECK ((length(idempotency_key) <= 255));
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_outcome_check CHECK ((outcome = ANY (ARRAY['ok'::text, 'refused'::text])));
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_pkey PRIMARY KEY (id);
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_target_check CHECK (((length(target) >= 1) AND (length(target) <= 200)));
CREATE INDEX management_audit_target_id ON drainpipe.management_audit USING btree (target, id DESC);

CREATE TABLE drainpipe.modules (
    name text NOT NULL,
    options jsonb DEFAULT '{}'::jsonb NOT NULL,
    checksum text NOT NULL,
    installed_at timestamp with time zone DEFAULT now() NOT NULL
);
ALTER TABLE drainpipe.modules ADD CONSTRAINT modules_pkey PRIMARY KEY (name);

CREATE TABLE drainpipe.queue_flow (
    queue text NOT NULL,
    concurrency integer,
    key_concurrency integer,
    rate_count integer,
    rate_per double precision,
    key_rate_count integer,
    key_rate_per double precision,
    ordered boolean DEFAULT false NOT NULL
);
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_check CHECK (((rate_count IS NULL) = (rate_per IS NULL)));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_check1 CHECK (((key_rate_count IS NULL) = (key_rate_per IS NULL)));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_concurrency_check CHECK ((concurrency > 0));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_key_concurrency_check CHECK ((key_concurrency > 0));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_key_rate_count_check CHECK ((key_rate_count > 0));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_key_rate_per_check CHECK ((key_rate_per > (0)::double precision));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_pkey PRIMARY KEY (queue);
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_rate_count_check CHECK ((rate_count > 0));
ALTER TABLE drainpipe.queue_flow ADD CONSTRAINT queue_flow_rate_per_check CHECK ((rate_per > (0)::double precision));

CREATE TABLE drainpipe.queue_pauses (
    queue text NOT NULL,
    paused_at timestamp with time zone NOT NULL
);
ALTER TABLE drainpipe.queue_pauses ADD CONSTRAINT queue_pauses_pkey PRIMARY KEY (queue);

CREATE TABLE drainpipe.queue_pending (
    queue text NOT NULL,
    live bigint DEFAULT 0 NOT NULL
);
ALTER TABLE drainpipe.queue_pending ADD CONSTRAINT queue_pending_pkey PRIMARY KEY (queue);

CREATE TABLE drainpipe.queue_policies (
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
    replayable boolean DEFAULT true NOT NULL
);
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_attempt_window_check CHECK ((attempt_window > (0)::double precision));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_check CHECK ((max_lease >= lease));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_lease_check CHECK ((lease > (0)::double precision));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_max_attempts_check CHECK ((max_attempts > 0));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_max_delay_check CHECK ((max_delay > (0)::double precision));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_max_payload_bytes_check CHECK ((max_payload_bytes > 0));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_max_pending_check CHECK ((max_pending > 0));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_pkey PRIMARY KEY (queue);
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_replay_window_check CHECK ((replay_window > (0)::double precision));
ALTER TABLE drainpipe.queue_policies ADD CONSTRAINT queue_policies_retention_check CHECK ((retention > (0)::double precision));

CREATE TABLE drainpipe.queue_priorities (
    queue text NOT NULL,
    levels integer[] NOT NULL
);
ALTER TABLE drainpipe.queue_priorities ADD CONSTRAINT queue_priorities_pkey PRIMARY KEY (queue);

CREATE TABLE drainpipe.schema_migrations (
    module text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);
ALTER TABLE drainpipe.schema_migrations ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (module, version);


-- Functions

CREATE OR REPLACE FUNCTION drainpipe.add_job_totals(p_rows jsonb)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    INSERT INTO drainpipe.job_totals AS t (queue, state, shard, n)
    SELECT r.queue, r.state, (pg_backend_pid() % 8)::smallint, r.n
      FROM jsonb_to_recordset(p_rows) AS r(queue text, state text, n bigint)
     WHERE r.n <> 0
     ORDER BY r.queue, r.state  -- one lock order for every writer
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = t.n + excluded.n
$function$;

CREATE OR REPLACE FUNCTION drainpipe.advance_schedule_v1(p_name text, p_ran timestamp with time zone, p_next_run timestamp with time zone, p_claim_token uuid, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH moved AS (
        UPDATE drainpipe.job_schedules s
           SET next_run = date_trunc('milliseconds', p_next_run),
               last_run = coalesce(date_trunc('milliseconds', p_ran), s.last_run),
               first_after = NULL,
               locked_until = NULL,
               claim_token = NULL
         WHERE s.name = p_name
           AND s.claim_token = p_claim_token
           AND CASE WHEN s.next_run IS NULL THEN s.first_after IS NOT NULL
                    ELSE date_trunc('milliseconds', s.next_run) = date_trunc('milliseconds', p_ran) END
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM moved)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.apply_job_retention_v1(p_min_interval double precision DEFAULT NULL::double precision, p_batch integer DEFAULT 10000, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
        WITH gone AS (
            DELETE FROM drainpipe.job_messages d
             WHERE d.id = ANY (ARRAY(
                   SELECT x.id FROM drainpipe.job_messages x
                    WHERE x.queue = v_policy.queue AND x.finished_at IS NOT NULL
                      AND x.finished_at < v_now - make_interval(secs => v_policy.retention)
                    ORDER BY x.finished_at LIMIT greatest(coalesce(p_batch, 10000), 1)))
            RETURNING d.queue, d.id
        ), attempts_gone AS (
            DELETE FROM drainpipe.job_attempts a USING gone g
             WHERE a.queue = g.queue AND a.job_id = g.id
        )
        SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM gone;
        PERFORM drainpipe.forget_job_steps(v_policy.queue, v_ids);
        v_total := v_total + cardinality(v_ids);
    END LOOP;
    PERFORM drainpipe.purge_job_events_v1(604800, v_now);
    RETURN v_total;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_event_name(p_event text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    IF p_event IS NULL OR length(p_event) = 0 OR length(p_event) > 200 THEN
        RAISE EXCEPTION 'event must be 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL OR length(p_key) > 200 THEN
        RAISE EXCEPTION 'event key must be at most 200 characters' USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_job_code(p_code text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT drainpipe.is_job_code(p_code) THEN
        RAISE EXCEPTION 'Invalid code "%": uppercase letters, digits and underscores, starting with a letter, at most 64', p_code
            USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_max_attempts(p_max_attempts integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be at least 1, not %', p_max_attempts USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_queue_name(p_queue text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_queue IS NULL OR p_queue !~ '^[a-z_][a-z0-9_]{0,46}$' THEN
        RAISE EXCEPTION 'Invalid queue name "%": lowercase letters, digits and underscores, at most 47', p_queue
            USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_schedule_form(p_cron text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_time_zone(p_time_zone text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_time_zone = 'UTC'
       OR EXISTS (SELECT 1 FROM drainpipe.known_time_zones z WHERE z.name = p_time_zone) THEN
        RETURN;
    END IF;
    IF p_time_zone IS NULL
       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names t WHERE t.name = p_time_zone) THEN
        RAISE EXCEPTION 'Unknown time zone %', p_time_zone USING ERRCODE = '22023';
    END IF;
    INSERT INTO drainpipe.known_time_zones (name) VALUES (p_time_zone) ON CONFLICT DO NOTHING;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.assert_turn_arrays(p_ids bigint[], p_attempts integer[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF coalesce(cardinality(p_ids), 0) IS DISTINCT FROM coalesce(cardinality(p_attempts), 0) THEN
        RAISE EXCEPTION 'complete_and_claim_jobs_v1: % ids but % attempts',
            coalesce(cardinality(p_ids), 0), coalesce(cardinality(p_attempts), 0)
            USING ERRCODE = '22023';
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'on'
 SET jit TO 'off'
AS $function$
BEGIN
    -- no writer between the count and the triggers: the counter starts exact
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'job_messages_policy_insert'
                      AND tgrelid = 'drainpipe.job_messages'::regclass) THEN
        CREATE TRIGGER job_messages_policy_insert AFTER INSERT ON drainpipe.job_messages
            REFERENCING NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.job_messages_policy_insert();
    END IF;
    PERFORM drainpipe.ensure_lease_trigger();
    INSERT INTO drainpipe.queue_pending (queue, live)
    SELECT p_queue, count(*) FROM drainpipe.job_messages WHERE queue = p_queue AND finished_at IS NULL
    ON CONFLICT (queue) DO UPDATE SET live = excluded.live;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.audit_bulk_action_v1(p_target text, p_actor text, p_action text, p_queue text, p_idempotency_key text, p_detail jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, outcome, idempotency_key, detail)
    VALUES (coalesce(p_now, clock_timestamp()), p_target, p_actor, p_action, p_queue, 'ok',
            p_idempotency_key, p_detail)
    RETURNING id
$function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_cancel_job_v1(p_target text, p_actor text, p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_pause_queue_v1(p_target text, p_actor text, p_queue text, p_pause boolean, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v1(p_target text, p_actor text, p_queue text, p_id bigint, p_idempotency_key text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, code text, new_job_id bigint)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT r.outcome, r.code, r.new_job_id
      FROM drainpipe.audited_replay_job_v2(p_target, p_actor, p_queue, p_id, p_idempotency_key,
                                           NULL, NULL, true, p_now) AS r
$function$;

CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v2(p_target text, p_actor text, p_queue text, p_id bigint, p_idempotency_key text, p_refusal text DEFAULT NULL::text, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, code text, new_job_id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.bury_job_v1(p_queue text, p_id bigint, p_attempt integer, p_error text, p_code text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, NULL, p_code, true, p_now) = 'dead', false)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_children_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.cancel_job_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.finished_at IS NOT NULL THEN
        RETURN 'terminal';
    END IF;
    IF v_job.state = 'leased' AND v_job.visible_at <= v_now THEN
        -- the lease ran out: that attempt expired (and a last attempt made the job dead)
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_job.visible_at, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        IF v_job.attempts >= v_job.max_attempts THEN
            UPDATE drainpipe.job_messages
               SET state = 'dead', finished_at = v_job.visible_at, last_code = 'MAX_ATTEMPTS',
                   last_error = 'The lease ran out on the last attempt'
             WHERE id = p_id;
            RETURN 'terminal';
        END IF;
    ELSIF v_job.state = 'leased' THEN
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_now, 'cancelled', 'CANCELLED')
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'cancelled', finished_at = v_now, last_code = 'CANCELLED'
     WHERE id = p_id;
    RETURN 'cancelled';
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.check_policy_insert(p_queue text, p_added bigint, p_largest bigint, p_latest timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'on'
 SET jit TO 'off'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.child_job_states(p_queue text, p_ids bigint[])
 RETURNS TABLE(id bigint, state text, last_code text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT i.id,
           CASE WHEN m.id IS NULL THEN 'purged' WHEN m.finished_at IS NULL THEN 'live' ELSE m.state END,
           CASE WHEN m.finished_at IS NOT NULL THEN m.last_code END
      FROM unnest(p_ids) WITH ORDINALITY AS i(id, n)
      LEFT JOIN drainpipe.job_messages m ON m.id = i.id AND m.queue = p_queue
     ORDER BY i.n
$function$;

CREATE OR REPLACE FUNCTION drainpipe.child_outcomes_v1(p_queue text, p_ids bigint[])
 RETURNS TABLE(id bigint, state text, last_code text, kept boolean, result jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.id, c.state, c.last_code, r.job_id IS NOT NULL, r.result
      FROM drainpipe.child_job_states(p_queue, p_ids) AS c
      LEFT JOIN drainpipe.job_steps r ON r.queue = p_queue AND r.job_id = c.id AND r.number = 0
$function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_bound(p_queue text, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_bound_pass()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT interval '10 seconds' $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_due_schedules_v1(p_lease double precision DEFAULT 60, p_batch integer DEFAULT 100, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.schedule_claim_v1
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    UPDATE drainpipe.job_schedules s
       SET locked_until = coalesce(p_now, statement_timestamp()) + make_interval(secs => greatest(coalesce(p_lease, 60), 1)),
           -- a fresh token per claim: a drain whose lease ran out cannot advance a later claim
           claim_token = gen_random_uuid()
     -- = ANY (ARRAY(...)), not a join: the planner keeps the primary key lookup even with a
     -- generic plan that guesses the batch is a tenth of the table
     WHERE s.name = ANY (ARRAY(
        -- SKIP LOCKED: two drains claiming at once split the due schedules between them
        -- coalesce(p_now, statement_timestamp()), being stable, bounds the index scan; clock_timestamp() would not
        SELECT d.name
          FROM drainpipe.job_schedules d
         WHERE d.due_at <= coalesce(p_now, statement_timestamp())
           AND (d.locked_until IS NULL OR d.locked_until <= coalesce(p_now, statement_timestamp()))
         ORDER BY d.due_at, d.name
         LIMIT greatest(coalesce(p_batch, 100), 1)
           FOR UPDATE SKIP LOCKED
     ))
    RETURNING s.name, s.cron, s.time_zone, s.queue, s.payload, s.next_run, s.first_after, s.claim_token
$function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_jobs_v1(p_queue text, p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_row_v1
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.id, c.attempts, c.enqueued_at, c.visible_until, c.payload, c.max_attempts, c.last_error
      FROM drainpipe.complete_and_claim_jobs_v1(p_queue, '{}'::bigint[], '{}'::integer[],
                                                p_lease, p_batch, p_now) AS c
$function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_and_claim_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision DEFAULT 300, p_batch integer DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_turn_row_v1
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    v_done bigint[];
    v_now timestamptz;
    v_until timestamptz;
    v_batch integer := greatest(p_batch, 1);
    v_ids bigint[];
    v_lapsed boolean;
    v_flow drainpipe.queue_flow;
    v_from timestamptz := '-infinity';  -- the bound (jobs 0014)
    v_first timestamptz;
    v_levels integer[];  -- the queue's priorities, when it has any (jobs 0017)
BEGIN
    -- the completions first: a claim must not take back a job this turn completes
    IF cardinality(p_ids) > 0 THEN
        PERFORM drainpipe.assert_turn_arrays(p_ids, p_attempts);
        v_done := ARRAY(SELECT drainpipe.complete_jobs_v1(p_queue, p_ids, p_attempts, p_now));
        IF cardinality(v_done) < cardinality(p_ids) THEN
            RETURN QUERY SELECT * FROM drainpipe.refused_turn_rows(p_ids, p_attempts, v_done);
        END IF;
    END IF;

    IF EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = p_queue) THEN
        RETURN;  -- paused: the completions above stand, nothing is claimed (jobs 0012)
    END IF;
    -- the queue's flow limits, if it has any (jobs 0015)
    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = p_queue;
    -- and its priorities, if it ever had a job with one (jobs 0017)
    SELECT p.levels INTO v_levels FROM drainpipe.queue_priorities p WHERE p.queue = p_queue;

    -- the claim's clock starts after the completions (as a claim sent after them would)
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + make_interval(secs => greatest(p_lease, 0));
    -- A job whose lease ran out on its last attempt is dead: its attempt expired.
    IF EXISTS (SELECT 1 FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NULL
                  AND x.attempts >= x.max_attempts AND x.visible_at <= v_now) THEN
        WITH swept AS (
            UPDATE drainpipe.job_messages m
               SET state = 'dead', finished_at = m.visible_at, last_code = 'MAX_ATTEMPTS',
                   last_error = 'The lease ran out on the last attempt'
             WHERE m.id = ANY (ARRAY(
                   SELECT x.id FROM drainpipe.job_messages x
                    WHERE x.queue = p_queue AND x.finished_at IS NULL
                      AND x.attempts >= x.max_attempts AND x.visible_at <= v_now
                    FOR UPDATE SKIP LOCKED))
            RETURNING m.queue, m.id, m.attempts, m.started_at, m.visible_at
        )
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        SELECT s.queue, s.id, s.attempts, s.started_at, s.visible_at, 'expired', 'LEASE_EXPIRED'
          FROM swept s
        ON CONFLICT DO NOTHING;
    END IF;

    IF v_flow.key_concurrency IS NOT NULL OR v_flow.key_rate_count IS NOT NULL OR v_flow.ordered THEN
        -- limits per key: the pick they allow, along the levels of a prioritised queue,
        -- rows locked, and whether one of them is a lapsed lease (jobs 0021)
        SELECT p.ids, p.lapsed INTO v_ids, v_lapsed
          FROM drainpipe.job_messages_flow_take(v_flow, v_batch, v_now, v_levels) p;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    ELSE
    IF v_flow.queue IS NOT NULL THEN
        -- queue-wide limits only: the pick below, no larger than the room they leave
        v_batch := drainpipe.job_messages_flow_room(v_flow, v_batch, v_now);
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF v_levels IS NOT NULL THEN
        -- priorities: the pick by level, highest first (jobs 0017), rows locked
        v_ids := drainpipe.job_messages_priority_pick(p_queue, v_levels, v_batch, v_now, p_now IS NULL);
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
        SELECT bool_or(x.state = 'leased') INTO v_lapsed
          FROM drainpipe.job_messages x WHERE x.id = ANY (v_ids);
    ELSE
    -- The pick is a statement of its own, into arrays: the take-over record below is then a
    -- branch taken only when a lapsed lease was picked (see jobs 0004). It starts at this
    -- connection's bound for the queue (jobs 0014), once more from the start when short.
    IF p_now IS NULL THEN
        v_from := drainpipe.claim_bound(p_queue, v_now);
    END IF;
    LOOP
        SELECT array_agg(p.id), bool_or(p.state = 'leased'), min(p.visible_at)
          INTO v_ids, v_lapsed, v_first
          FROM (
              -- oldest visible first; rows another worker is claiming right now are skipped
              SELECT x.id, x.state, x.visible_at
                FROM drainpipe.job_messages x
               WHERE x.queue = p_queue AND x.finished_at IS NULL AND x.visible_at <= v_now
                 AND x.attempts < x.max_attempts
                 AND x.visible_at >= v_from  -- the bound: entries below are not visited
               ORDER BY x.visible_at, x.id
               LIMIT v_batch
                 FOR UPDATE SKIP LOCKED
          ) p;
        EXIT WHEN v_from = '-infinity' OR coalesce(cardinality(v_ids), 0) >= v_batch;
        v_from := '-infinity';  -- short above the bound: once more from the start
    END LOOP;
    PERFORM drainpipe.keep_claim_bound(p_queue, v_first, p_now);
    END IF;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_lapsed THEN
        -- a lease that ran out: that attempt expired, and this claim takes the job over
        -- (the rows are locked by the pick, so they still read as they were picked)
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        SELECT p_queue, x.id, x.attempts, x.started_at, x.visible_at, 'expired', 'LEASE_EXPIRED'
          FROM drainpipe.job_messages x
         WHERE x.id = ANY (v_ids) AND x.state = 'leased'
        ON CONFLICT DO NOTHING;
    END IF;

    RETURN QUERY
    UPDATE drainpipe.job_messages j
       SET attempts = j.attempts + 1,
           visible_at = v_until,
           started_at = v_now,
           state = 'leased'
     -- = ANY (array): primary-key lookups even under a generic plan
     WHERE j.id = ANY (v_ids)
    RETURNING j.id, j.attempts, j.enqueued_at, j.visible_at, j.payload, j.max_attempts,
              j.last_error, false;
    IF v_flow.rate_count IS NOT NULL OR v_flow.key_rate_count IS NOT NULL THEN
        -- the rate windows count the attempts just started (jobs 0015)
        PERFORM drainpipe.flow_record_claims(v_flow,
            ARRAY(SELECT drainpipe.job_key(x.payload) FROM drainpipe.job_messages x
                   WHERE x.id = ANY (v_ids)),
            v_now);
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_job_v1(p_queue text, p_id bigint, p_attempt integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT EXISTS (SELECT 1 FROM drainpipe.complete_jobs_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_now))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    c_leased constant text := 'leased';
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_done integer;
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET state = 'succeeded', finished_at = v_now, last_code = NULL
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue AND m.state = c_leased
    RETURNING m.id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_ids) THEN
        UPDATE drainpipe.job_attempts a
           SET late_outcome = 'succeeded'
          FROM unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE a.queue = p_queue AND a.job_id = f.id AND a.number = f.attempt
           AND a.outcome = 'cancelled' AND a.late_outcome IS NULL;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.count_live_jobs(p_queue text, p_limit bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT count(*) FROM (
        SELECT 1 FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.finished_at IS NULL LIMIT p_limit) x
$function$;

CREATE OR REPLACE FUNCTION drainpipe.counted_job_records(p_records drainpipe.job_record_v1[])
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
     ORDER BY r.ordinality
$function$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_ids(p_queue text, p_ids bigint[], p_batch integer)
 RETURNS SETOF bigint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT m.id FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.state = 'dead' AND m.replayed_by IS NULL
       AND (p_ids IS NULL OR m.id = ANY (p_ids))
     ORDER BY m.id DESC
     LIMIT greatest(coalesce(p_batch, 1000), 1)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.dead_job_message(p_payload jsonb, p_max_attempts integer, p_dedupe_key text, p_last_error text)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT jsonb_build_object('payload', p_payload, 'max_attempts', p_max_attempts,
                              'last_error', p_last_error, 'dead', true)
           || CASE WHEN p_dedupe_key IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('dedupe_key', p_dedupe_key) END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.debounce_job(p_queue text, p_id bigint, p_payload jsonb, p_seconds double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_payload ? 'priority' THEN
        -- the new payload's priority is a level the claim reads (jobs 0017)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    UPDATE drainpipe.job_messages m
       SET payload = coalesce(p_payload, '{}'::jsonb),
           visible_at = clock_timestamp() + make_interval(secs => greatest(p_seconds, 0))
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = 0 AND m.finished_at IS NULL
       AND m.state = 'queued';
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.drop_queue_policy_v1(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_stamp bigint;
BEGIN
    DELETE FROM drainpipe.queue_pending WHERE queue = p_queue;
    -- jobs 0022, the sequence advanced first (jobs 0023)
    v_stamp := drainpipe.flow_budget_advance(p_queue);
    UPDATE drainpipe.flow_budget SET epoch = NULL, stamp = v_stamp WHERE queue = p_queue;
    DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;  -- jobs 0015
    DELETE FROM drainpipe.queue_policies WHERE queue = p_queue;
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.emit_event_v1(p_event text, p_key text, p_data jsonb DEFAULT NULL::jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_flow_job_v1(p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer, p_dedupe_key text, p_dedupe_running boolean, p_key text, p_debounce double precision, p_throttle double precision)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_job_v1(p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5, p_dedupe_key text DEFAULT NULL::text, p_dedupe_running boolean DEFAULT true)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_id bigint;
    v_at timestamptz;
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF p_payload ? 'priority' THEN
        -- a non-zero priority: the queue's claims order by it from now on (10_priorities.sql)
        PERFORM drainpipe.note_job_priority(p_queue, nullif(drainpipe.job_priority(p_payload), 0));
    END IF;
    IF p_dedupe_key IS NULL THEN
        -- the common case stays one INSERT
        SELECT s.id, s.at INTO v_id, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
        INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at)
        OVERRIDING SYSTEM VALUE
        VALUES (v_id, p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, v_at,
                clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)));
        RETURN v_id;
    END IF;
    RETURN drainpipe.enqueue_keyed_job(p_queue, p_payload, p_delay, p_max_attempts,
                                       p_dedupe_key, p_dedupe_running, NULL);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_jobs_v1(p_queue text, p_payloads jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5)
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    -- read once: a function with its own settings is called, not inlined, for every row
    v_window interval := drainpipe.job_stamp_window();
BEGIN
    IF NOT drainpipe.is_queue_name(p_queue) THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    IF p_payloads @? '$[*].priority' THEN
        -- a non-zero priority among them: see enqueue_job_v1
        PERFORM drainpipe.note_job_priorities(p_queue, p_payloads);
    END IF;
    RETURN QUERY
    WITH drawn AS MATERIALIZED (
        SELECT e.n, e.value, clock_timestamp() AS before_at,
               nextval('drainpipe.job_messages_id_seq'::regclass) AS id, clock_timestamp() AS at
          FROM jsonb_array_elements(p_payloads) WITH ORDINALITY AS e(value, n)
         ORDER BY e.n
    ), stamped AS (
        SELECT d.n, d.value, d.id, d.at,
               CASE WHEN d.at - d.before_at > v_window
                    THEN drainpipe.job_stamp('drainpipe.job_messages_id_seq') END AS again
          FROM drawn d
        OFFSET 0
    )
    INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at)
    OVERRIDING SYSTEM VALUE
    SELECT coalesce((s.again).id, s.id), p_queue, s.value, p_max_attempts,
           coalesce((s.again).at, s.at),
           clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0))
      FROM stamped s
     ORDER BY s.n
    RETURNING id;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.enqueue_keyed_job(p_queue text, p_payload jsonb, p_delay double precision, p_max_attempts integer, p_dedupe_key text, p_dedupe_running boolean, p_parent_id bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_id bigint;
    v_at timestamptz;
BEGIN
    -- one enqueuer per (queue, key) at a time, so two callers cannot both miss each other
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.job:' || p_queue), hashtext(p_dedupe_key));
    SELECT m.id INTO v_id
      FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key AND m.finished_at IS NULL
       AND (p_dedupe_running OR m.attempts = 0)
       -- a job whose last lease ran out is dead already, whatever the sweep says
       AND NOT (m.attempts >= m.max_attempts AND m.visible_at <= clock_timestamp())
     ORDER BY m.id
     LIMIT 1;
    IF v_id IS NOT NULL THEN
        RETURN v_id;
    END IF;
    SELECT s.id, s.at INTO v_id, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
    INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, dedupe_key, enqueued_at,
                                        visible_at, parent_id)
    OVERRIDING SYSTEM VALUE
    VALUES (v_id, p_queue, coalesce(p_payload, '{}'::jsonb), p_max_attempts, p_dedupe_key, v_at,
            clock_timestamp() + make_interval(secs => greatest(coalesce(p_delay, 0), 0)), p_parent_id)
    -- The lock makes a clash impossible under READ COMMITTED. A caller's REPEATABLE READ
    -- transaction may not see a waiting job committed after its snapshot: DO NOTHING then
    -- fails with 40001 (kind "serialization", retry), not a unique violation.
    ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL AND attempts = 0 AND finished_at IS NULL
    DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT m.id INTO v_id FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.dedupe_key = p_dedupe_key AND m.attempts = 0
           AND m.finished_at IS NULL;
    END IF;
    RETURN v_id;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- what is leased, per queue and key: concurrency and key_concurrency count here
    -- (bounded by the limits: only leased rows are in it)
    CREATE INDEX IF NOT EXISTS job_messages_flow_leased_idx
        ON drainpipe.job_messages (queue, drainpipe.job_key(payload), visible_at)
        WHERE state = 'leased';
    -- the live jobs of a key in enqueue order: ordered=True probes for an earlier one
    -- (ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
            WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_trigger()
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_max double precision;
BEGIN
    SELECT min(p.max_lease) INTO v_max FROM drainpipe.queue_policies p;
    IF v_max IS NULL OR EXISTS (
           SELECT 1 FROM pg_trigger t
            WHERE t.tgrelid = 'drainpipe.job_messages'::regclass AND t.tgname = 'job_messages_policy_lease'
              AND t.tgargs = convert_to(v_max::text, 'UTF8') || '\x00'::bytea) THEN
        RETURN;
    END IF;
    -- claims and heartbeats only (a failure moves to retry_wait: its backoff is no lease)
    EXECUTE format('CREATE OR REPLACE TRIGGER job_messages_policy_lease
                      BEFORE UPDATE OF visible_at ON drainpipe.job_messages
                      FOR EACH ROW WHEN (NEW.state = ''leased'' AND NEW.visible_at > OLD.visible_at
                                         AND (NEW.started_at IS NULL
                                              OR NEW.visible_at > NEW.started_at + make_interval(secs => %L::double precision + 1)))
                      EXECUTE FUNCTION drainpipe.job_messages_policy_lease(%L)',
                   v_max::text, v_max::text);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_priority_claim(p_queue text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    CREATE INDEX IF NOT EXISTS job_messages_priority_idx
        ON drainpipe.job_messages (queue, drainpipe.job_priority(payload), visible_at, id)
        WHERE finished_at IS NULL;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(p_queue text, p_concurrency integer, p_key_concurrency integer, p_rate_count integer, p_rate_per double precision, p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_stamp bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- jobs 0023: a sequence per queue with a concurrency (a queue limited earlier gets its own)
    IF p_concurrency IS NOT NULL AND drainpipe.flow_budget_sequence(p_queue) IS NULL THEN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS drainpipe.%I', 'flow_budget__' || p_queue);
    END IF;
    -- jobs 0022: granted stays (chunks in flight still count until an exact count); the
    -- sequence advanced first, whether an epoch is open or not (a chunk kept from one that
    -- a spent budget closed is not spent under other limits)
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_overview_v1(p_queues text[], p_force boolean DEFAULT false)
 RETURNS bigint
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT CASE WHEN p_force THEN drainpipe.recount_job_totals_v1(p_queues) ELSE 0 END $function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v1(p_queue text, p_max_payload_bytes integer, p_max_pending integer, p_lease double precision, p_max_lease double precision, p_max_delay double precision, p_max_attempts integer, p_attempt_window double precision, p_retention double precision, p_encrypt boolean)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_policies AS p (queue, max_payload_bytes, max_pending, lease,
        max_lease, max_delay, max_attempts, attempt_window, retention, encrypt)
    VALUES (p_queue, p_max_payload_bytes, p_max_pending, p_lease, p_max_lease, p_max_delay,
            p_max_attempts, p_attempt_window, p_retention, p_encrypt)
    ON CONFLICT (queue) DO UPDATE SET
        max_payload_bytes = excluded.max_payload_bytes, max_pending = excluded.max_pending,
        lease = excluded.lease, max_lease = excluded.max_lease, max_delay = excluded.max_delay,
        max_attempts = excluded.max_attempts, attempt_window = excluded.attempt_window,
        retention = excluded.retention, encrypt = excluded.encrypt,
        updated_at = clock_timestamp();
    PERFORM drainpipe.attach_queue_policy_v1(p_queue);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v2(p_queue text, p_max_payload_bytes integer, p_max_pending integer, p_lease double precision, p_max_lease double precision, p_max_delay double precision, p_max_attempts integer, p_attempt_window double precision, p_retention double precision, p_encrypt boolean, p_replay_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- before the policy row: a replay in flight holds this lock shared (see
    -- replay_rules_in_force), so a queue's first policy, which has no row a replay could
    -- have locked yet, is ordered with replays too
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    PERFORM drainpipe.ensure_queue_policy_v1(p_queue, p_max_payload_bytes, p_max_pending,
        p_lease, p_max_lease, p_max_delay, p_max_attempts, p_attempt_window, p_retention,
        p_encrypt);
    UPDATE drainpipe.queue_policies
       SET replay_window = p_replay_window, replayable = coalesce(p_replayable, true)
     WHERE queue = p_queue;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v3(p_queue text, p_max_payload_bytes integer, p_max_pending integer, p_lease double precision, p_max_lease double precision, p_max_delay double precision, p_max_attempts integer, p_attempt_window double precision, p_retention double precision, p_encrypt boolean, p_replay_window double precision, p_replayable boolean, p_concurrency integer DEFAULT NULL::integer, p_key_concurrency integer DEFAULT NULL::integer, p_rate_count integer DEFAULT NULL::integer, p_rate_per double precision DEFAULT NULL::double precision, p_key_rate_count integer DEFAULT NULL::integer, p_key_rate_per double precision DEFAULT NULL::double precision, p_ordered boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM drainpipe.ensure_queue_policy_v2(p_queue, p_max_payload_bytes, p_max_pending,
        p_lease, p_max_lease, p_max_delay, p_max_attempts, p_attempt_window, p_retention,
        p_encrypt, p_replay_window, p_replayable);
    PERFORM drainpipe.ensure_queue_flow_v1(p_queue, p_concurrency, p_key_concurrency,
        p_rate_count, p_rate_per, p_key_rate_count, p_key_rate_per, p_ordered);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_lease_v1(p_queue text, p_id bigint, p_attempt integer, p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_job_leases_v1(p_queue, ARRAY[p_id], ARRAY[p_attempt], p_lease, p_now))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    c_leased constant text := 'leased';
    v_until timestamptz := coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(p_lease, 0));
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET visible_at = v_until
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt AND m.state = c_leased
    RETURNING m.id;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v1(p_queue text, p_id bigint, p_attempt integer, p_error text, p_retry_in double precision DEFAULT NULL::double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, p_retry_in, 'HANDLER_ERROR', false, p_now) $function$;

CREATE OR REPLACE FUNCTION drainpipe.fail_job_v2(p_queue text, p_id bigint, p_attempt integer, p_error text, p_retry_in double precision DEFAULT NULL::double precision, p_code text DEFAULT NULL::text, p_discard boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
    v_job drainpipe.job_messages;
    v_error text := left(coalesce(p_error, 'null'), 4000);
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_code text := CASE WHEN drainpipe.is_job_code(p_code) THEN p_code ELSE 'HANDLER_ERROR' END;
BEGIN
    SELECT * INTO v_job FROM drainpipe.job_messages
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_job.state <> 'leased' THEN
        IF v_job.state = 'cancelled' THEN
            UPDATE drainpipe.job_attempts SET late_outcome = 'failed'
             WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
               AND outcome = 'cancelled' AND late_outcome IS NULL;
        END IF;
        RETURN NULL;
    END IF;
    INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
    VALUES (p_queue, p_id, p_attempt, v_job.started_at, v_now,
            CASE WHEN coalesce(p_discard, false) THEN 'discarded' ELSE 'failed' END, v_code)
    ON CONFLICT DO NOTHING;
    IF coalesce(p_discard, false) OR v_job.attempts >= v_job.max_attempts THEN
        UPDATE drainpipe.job_messages
           SET state = 'dead', finished_at = v_now, last_error = v_error,
               last_code = CASE WHEN coalesce(p_discard, false) THEN v_code ELSE 'MAX_ATTEMPTS' END
         WHERE id = p_id;
        RETURN 'dead';
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'retry_wait', last_error = v_error, last_code = v_code,
           visible_at = v_now + make_interval(
               secs => greatest(coalesce(p_retry_in, drainpipe.job_retry_delay(v_job.attempts)), 0))
     WHERE id = p_id;
    RETURN 'queued';
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_advance(p_queue text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_sequence regclass := drainpipe.flow_budget_sequence(p_queue);
BEGIN
    IF v_sequence IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN nextval(v_sequence);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_applies(p_flow drainpipe.queue_flow)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT p_flow.concurrency IS NOT NULL AND p_flow.rate_count IS NULL
       AND p_flow.key_concurrency IS NULL AND p_flow.key_rate_count IS NULL
       AND NOT p_flow.ordered
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_chunk(p_concurrency integer)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT least(1000, greatest(200, p_concurrency / 64))::bigint
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_pending(p_queue text)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT current_setting('drainpipe.flow_budget_pending.' || p_queue)::bigint
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_reset(p_flow drainpipe.queue_flow, p_leased bigint, p_room integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_cap bigint := p_flow.concurrency - p_leased;
    v_stamp bigint;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) THEN
        -- other limits: no epoch is open (the change of limits closed it), nothing to do
        RETURN;
    END IF;
    -- this session's own leftover was counted as nothing: forget it
    PERFORM set_config('drainpipe.flow_budget.' || p_flow.queue, '', false);
    IF v_cap - p_room >= 16 * c_chunk THEN
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        INSERT INTO drainpipe.flow_budget AS b (queue, epoch, concurrency, cap, granted, stamp)
        VALUES (p_flow.queue, coalesce(v_stamp, pg_current_xact_id()::text::bigint), p_flow.concurrency,
                v_cap, p_room, v_stamp)
        ON CONFLICT (queue) DO UPDATE
           SET epoch = excluded.epoch, concurrency = excluded.concurrency,
               cap = excluded.cap, granted = excluded.granted, stamp = excluded.stamp;
    ELSIF EXISTS (SELECT 1 FROM drainpipe.flow_budget b
                   WHERE b.queue = p_flow.queue AND (b.epoch IS NOT NULL OR b.granted <> 0)) THEN
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        UPDATE drainpipe.flow_budget b SET epoch = NULL, granted = 0, stamp = v_stamp
         WHERE b.queue = p_flow.queue;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_sequence(p_queue text)
 RETURNS regclass
 LANGUAGE sql
 STABLE
AS $function$
    SELECT to_regclass('drainpipe.' || quote_ident('flow_budget__' || p_queue))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_spend(p_queue text, p_batch integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_name text := 'drainpipe.flow_budget.' || p_queue;
    v_kept text := current_setting(v_name, true);
    v_left bigint;
    v_seen bigint;
    v_sequence oid;
    v_set text;
    v_flow drainpipe.queue_flow;
BEGIN
    IF v_kept IS NULL OR split_part(v_kept, ':', 3) = '' OR p_batch > 100 THEN
        RETURN NULL;
    END IF;
    v_left := split_part(v_kept, ':', 2)::bigint;
    IF v_left < p_batch THEN
        RETURN NULL;
    END IF;
    v_seen := split_part(v_kept, ':', 3)::bigint;
    v_sequence := split_part(v_kept, ':', 4)::oid;
    -- before the lock: a change since the session checked sends it to the row, free to
    -- count under the exclusive lock
    IF pg_sequence_last_value(v_sequence) IS DISTINCT FROM v_seen THEN
        RETURN NULL;
    END IF;
    IF NOT pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue)) THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue));
    END IF;
    v_set := set_config('drainpipe.flow_budget_locked.' || p_queue, 'on', true);
    -- under the lock: no exact count runs, and none ran since the session checked
    IF pg_sequence_last_value(v_sequence) IS NOT DISTINCT FROM v_seen THEN
        v_set := set_config(v_name, split_part(v_kept, ':', 1) || ':' || (v_left - p_batch) || ':'
                                    || v_seen || ':' || v_sequence, false);
        RETURN p_batch;
    END IF;
    -- a count ran while this claim waited for the lock: the row decides, under it
    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = p_queue;
    RETURN drainpipe.flow_budget_take(v_flow, p_batch);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_take(p_flow drainpipe.queue_flow, p_batch integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_name text := 'drainpipe.flow_budget.' || p_flow.queue;
    v_kept text := current_setting(v_name, true);
    v_locked boolean := coalesce(current_setting('drainpipe.flow_budget_locked.' || p_flow.queue, true) = 'on', false);
    v_epoch bigint;
    v_left bigint := 0;
    v_open bigint;
    v_stamp bigint;
    v_sequence regclass;
    v_now_at bigint;
    v_seen text;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) OR p_batch > 100 THEN
        IF v_locked THEN
            -- other limits since the shared lock was taken: take nothing this time
            v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue, '-1', true);
            RETURN -1;
        END IF;
        RETURN NULL;
    END IF;
    IF v_kept <> '' THEN
        v_epoch := split_part(v_kept, ':', 1)::bigint;
        v_left := split_part(v_kept, ':', 2)::bigint;
    END IF;
    IF NOT v_locked THEN
        -- the first look, without a lock: is there a budget to take? (the session's chunk,
        -- or a chunk to take with another to spare, so that claims beside this one rarely
        -- spend the last before it locks). When there is, the same statement takes the
        -- shared lock: a try, so that it never waits inside a statement whose snapshot
        -- predates the lock
        SELECT CASE WHEN b.epoch IS NOT NULL AND b.concurrency = p_flow.concurrency
                         AND ((b.epoch = v_epoch AND v_left >= p_batch) OR b.granted + 2 * c_chunk <= b.cap)
                    THEN pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue))
               END
          INTO v_locked
          FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
        IF v_locked IS NULL THEN
            RETURN NULL;  -- no budget: the caller counts under the exclusive lock
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
    IF v_left >= p_batch THEN
        SELECT b.epoch, b.stamp INTO v_open, v_stamp FROM drainpipe.flow_budget b
         WHERE b.queue = p_flow.queue AND b.concurrency = p_flow.concurrency;
        v_seen := CASE WHEN v_stamp = v_now_at THEN v_now_at || ':' || v_sequence::oid ELSE ':' END;
        IF v_open = v_epoch THEN
            v_kept := set_config(v_name, v_epoch || ':' || (v_left - p_batch) || ':' || v_seen, false);
            RETURN p_batch;
        END IF;
    END IF;
    -- a chunk of the open epoch (the update reads the row as the last claim committed it)
    UPDATE drainpipe.flow_budget b SET granted = b.granted + c_chunk
     WHERE b.queue = p_flow.queue AND b.epoch IS NOT NULL
       AND b.concurrency = p_flow.concurrency AND b.granted + c_chunk <= b.cap
    RETURNING b.epoch, b.stamp INTO v_open, v_stamp;
    IF FOUND THEN
        IF v_open IS DISTINCT FROM v_epoch THEN
            v_left := 0;  -- what the session kept belongs to a closed epoch: never spent
        END IF;
        -- a chunk is at least 200, a budgeted batch at most 100
        v_seen := CASE WHEN v_stamp = v_now_at THEN v_now_at || ':' || v_sequence::oid ELSE ':' END;
        v_kept := set_config(v_name, v_open || ':' || (v_left + c_chunk - p_batch) || ':' || v_seen, false);
        RETURN p_batch;
    END IF;
    -- spent (or closed) since the first look: close it, waiting for the claims doing the
    -- same (on the row); what it handed out counts as leased (see jobs 0022's header)
    UPDATE drainpipe.flow_budget b SET epoch = NULL WHERE b.queue = p_flow.queue
    RETURNING b.granted INTO v_left;
    v_kept := set_config(v_name, '', false);
    v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue, coalesce(v_left, -1)::text, true);
    RETURN -1;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_gate(p_flow drainpipe.queue_flow, p_batch integer, p_leased bigint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    c_slots constant integer := 8;
    c_cap constant integer := 100;
    v_slot integer;
BEGIN
    IF p_flow.concurrency IS NOT NULL AND p_flow.rate_count IS NULL
       AND p_flow.key_concurrency IS NULL AND p_flow.key_rate_count IS NULL AND NOT p_flow.ordered
       AND p_batch <= c_cap AND p_leased + 2 * c_slots * c_cap <= p_flow.concurrency THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
        FOR v_slot IN 0 .. c_slots - 1 LOOP
            IF pg_try_advisory_xact_lock(hashtext('drainpipe.flow.slot:' || p_flow.queue), v_slot) THEN
                RETURN (c_slots - 1) * c_cap;
            END IF;
        END LOOP;
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow.slot:' || p_flow.queue),
                                      pg_backend_pid() % c_slots);
        RETURN (c_slots - 1) * c_cap;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    RETURN 0;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_leased_hint(p_flow drainpipe.queue_flow)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_kept bigint := nullif(current_setting('drainpipe.flow_leased.' || p_flow.queue, true), '')::bigint;
BEGIN
    IF v_kept IS NOT NULL AND p_flow.rate_count IS NULL AND p_flow.key_concurrency IS NULL
       AND p_flow.key_rate_count IS NULL AND NOT p_flow.ordered
       AND v_kept + 4 * 8 * 100 <= p_flow.concurrency THEN
        RETURN v_kept;
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_record_claims(p_flow drainpipe.queue_flow, p_keys text[], p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_room(p_flow drainpipe.queue_flow, p_batch integer, p_leased bigint, p_now timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.forget_job_steps(p_queue text, p_ids bigint[])
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH steps_gone AS (
        DELETE FROM drainpipe.job_steps s WHERE s.queue = p_queue AND s.job_id = ANY (p_ids)
    )
    DELETE FROM drainpipe.job_workflows w WHERE w.queue = p_queue AND w.job_id = ANY (p_ids)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.get_job_v1(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_get_job(p_queue, p_id, p_now) r))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.hold_job_fence(p_queue text, p_id bigint, p_attempt integer)
 RETURNS timestamp with time zone
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT m.enqueued_at FROM drainpipe.job_messages m
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = p_attempt
       AND m.state = 'leased' AND m.finished_at IS NULL
       FOR UPDATE
$function$;

CREATE OR REPLACE FUNCTION drainpipe.is_job_code(p_code text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT p_code IS NOT NULL AND p_code ~ '^[A-Z][A-Z0-9_]{0,63}$' $function$;

CREATE OR REPLACE FUNCTION drainpipe.is_queue_name(p_queue text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT p_queue IS NOT NULL AND p_queue ~ '^[a-z_][a-z0-9_]{0,46}$' $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_cause(p_queue text, p_id bigint)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT a.code FROM drainpipe.job_attempts a
     WHERE a.queue = p_queue AND a.job_id = p_id AND a.code IS NOT NULL
     ORDER BY a.number DESC LIMIT 1
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_causes_v1(p_queues text[], p_ids bigint[])
 RETURNS TABLE(queue text, id bigint, code text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT j.queue, j.id, c.code
      FROM unnest(p_queues, p_ids) AS j(queue, id)
      CROSS JOIN LATERAL (
          SELECT a.code FROM drainpipe.job_attempts a
           WHERE a.queue = j.queue AND a.job_id = j.id AND a.code IS NOT NULL
           ORDER BY a.number DESC LIMIT 1
      ) c
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_held(p_flow drainpipe.queue_flow, p_ids bigint[], p_now timestamp with time zone)
 RETURNS TABLE(id bigint, held_by text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    -- the keys are read only when a per-key limit needs them (parsing costs every row)
    v_keyed boolean := p_flow.ordered OR p_flow.key_concurrency IS NOT NULL
                       OR p_flow.key_rate_count IS NOT NULL;
    v_leased bigint;
    v_claims bigint;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF p_flow.rate_count IS NOT NULL THEN
        SELECT count(*) INTO v_claims FROM drainpipe.flow_claims c
         WHERE c.queue = p_flow.queue
           AND c.claimed_at > p_now - make_interval(secs => p_flow.rate_per);
    END IF;
    IF p_ids IS NOT NULL THEN
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id, CASE WHEN v_keyed THEN drainpipe.job_key(j.payload) END AS key
              FROM drainpipe.job_messages j
             WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
               AND j.visible_at <= p_now AND j.attempts < j.max_attempts
               AND j.id = ANY (p_ids)
        ),
        keys AS (
            SELECT k.key,
                   CASE WHEN p_flow.ordered THEN (
                       SELECT min(e.id) FROM drainpipe.job_messages e
                        WHERE e.queue = p_flow.queue AND drainpipe.job_key(e.payload) = k.key
                          AND drainpipe.job_key(e.payload) IS NOT NULL AND e.finished_at IS NULL)
                   END AS first_id,
                   CASE WHEN p_flow.key_concurrency IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.job_messages l
                        WHERE l.queue = p_flow.queue AND drainpipe.job_key(l.payload) = k.key
                          AND l.state = 'leased' AND l.visible_at > p_now)
                   END AS leased,
                   CASE WHEN p_flow.key_rate_count IS NOT NULL THEN (
                       SELECT count(*) FROM drainpipe.flow_claims c
                        WHERE c.queue = p_flow.queue AND c.key = k.key
                          AND c.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per))
                   END AS claims
              FROM (SELECT DISTINCT d.key FROM due d WHERE d.key IS NOT NULL) k
        )
        SELECT h.id, h.held_by FROM (
            SELECT d.id, CASE
                       WHEN k.first_id < d.id THEN 'order'
                       WHEN v_leased >= p_flow.concurrency OR k.leased >= p_flow.key_concurrency
                           THEN 'concurrency'
                       WHEN v_claims >= p_flow.rate_count OR k.claims >= p_flow.key_rate_count
                           THEN 'rate'
                   END AS held_by
              FROM due d LEFT JOIN keys k ON k.key = d.key
        ) h
        WHERE h.held_by IS NOT NULL;
        RETURN;
    END IF;
    RETURN QUERY
    -- materialized: each job's key is parsed once, not once per join
    WITH due AS MATERIALIZED (
        SELECT j.id, CASE WHEN v_keyed THEN drainpipe.job_key(j.payload) END AS key
          FROM drainpipe.job_messages j
         WHERE j.queue = p_flow.queue AND j.finished_at IS NULL
           AND j.visible_at <= p_now AND j.attempts < j.max_attempts
    ),
    firsts AS (
        SELECT drainpipe.job_key(e.payload) AS key, min(e.id) AS first_id
          FROM drainpipe.job_messages e
         WHERE p_flow.ordered AND e.queue = p_flow.queue AND e.finished_at IS NULL
           AND drainpipe.job_key(e.payload) IS NOT NULL
         GROUP BY 1
    ),
    leased AS (
        SELECT drainpipe.job_key(l.payload) AS key, count(*) AS n
          FROM drainpipe.job_messages l
         WHERE p_flow.key_concurrency IS NOT NULL AND l.queue = p_flow.queue
           AND l.state = 'leased' AND l.visible_at > p_now
         GROUP BY 1
    ),
    claims AS (
        SELECT c.key, count(*) AS n
          FROM drainpipe.flow_claims c
         WHERE p_flow.key_rate_count IS NOT NULL AND c.queue = p_flow.queue
           AND c.key IS NOT NULL
           AND c.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
         GROUP BY 1
    )
    SELECT h.id, h.held_by FROM (
        SELECT d.id, CASE
                   WHEN f.first_id < d.id THEN 'order'
                   WHEN v_leased >= p_flow.concurrency OR l.n >= p_flow.key_concurrency
                       THEN 'concurrency'
                   WHEN v_claims >= p_flow.rate_count OR c.n >= p_flow.key_rate_count
                       THEN 'rate'
               END AS held_by
          FROM due d
          LEFT JOIN firsts f ON f.key = d.key
          LEFT JOIN leased l ON l.key = d.key
          LEFT JOIN claims c ON c.key = d.key
    ) h
    WHERE h.held_by IS NOT NULL;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_flow_holds_v1(p_queues text[], p_ids bigint[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(queue text, id bigint, held_by text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_history_v1(p_queue text, p_id bigint, p_attempts integer, p_state text, p_started_at timestamp with time zone, p_finished_at timestamp with time zone, p_lease_end timestamp with time zone, p_last_code text, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
        ON a.queue = p_queue AND a.job_id = p_id AND a.number = g.n
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_key(p_stored jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}'
                THEN coalesce(p_stored ->> 'key', p_stored #>> '{context,tenant}') END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_message(p_payload jsonb, p_max_attempts integer, p_dedupe_key text)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'payload', coalesce(p_payload, '{}'::jsonb),
        'max_attempts', p_max_attempts,
        'dedupe_key', p_dedupe_key
    )) || jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb));
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(p_flow drainpipe.queue_flow, p_batch integer, p_now timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_leased bigint := 0;
    v_room integer;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        v_room := drainpipe.flow_budget_spend(p_flow.queue, p_batch);
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_budget_take(p_flow, p_batch);
    END IF;
    IF v_room >= 0 THEN
        RETURN v_room;
    END IF;
    IF v_room IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    ELSIF drainpipe.flow_budget_pending(p_flow.queue) < 0 THEN
        RETURN 0;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_room(p_flow, p_batch, v_leased, p_now);
        IF p_flow.concurrency IS NOT NULL THEN
            PERFORM drainpipe.flow_budget_reset(p_flow, v_leased, v_room);
        END IF;
        RETURN v_room;
    END IF;
    -- the budget ran out under the shared lock: its chunks count as leased
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + drainpipe.flow_budget_pending(p_flow.queue), p_now);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_take(p_flow drainpipe.queue_flow, p_batch integer, p_now timestamp with time zone, p_levels integer[], OUT ids bigint[], OUT lapsed boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_queue text := p_flow.queue;
    v_room integer;
    v_limit integer;
    v_keys text[] := '{}';
    v_chunk integer;
    v_scanned integer := 0;
    v_bound integer := p_batch * 50 + 500;
    v_level integer := p_levels[1];  -- NULL: no priorities
    v_after_at timestamptz := '-infinity';
    v_after_id bigint := 0;
    v_rows integer;
    v_r record;
    v_taken bigint;
    v_last_at timestamptz;
    v_last_id bigint;
BEGIN
    ids := '{}';
    lapsed := false;
    IF p_flow.concurrency IS NULL AND p_flow.rate_count IS NULL THEN
        -- no queue-wide limit: the whole batch, under flow_gate's exclusive lock (taken
        -- here without its calls)
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(v_queue));
        v_room := p_batch;
    ELSE
        v_room := drainpipe.job_messages_flow_room(p_flow, p_batch, p_now);
    END IF;
    v_chunk := least(2 * v_room + 8, v_bound);
    WHILE v_room > 0 LOOP
        v_limit := v_room;
        v_rows := 0;
        IF v_level IS NULL THEN
            FOR v_r IN
            SELECT c.id, c.visible_at, c.k, c.leased, c.claimed, c.picked, y.state
              FROM (
                  -- each candidate's probes, once (OFFSET 0: not flattened into
                  -- the filter and the output, which would probe twice)
                  SELECT c0.*,
                         CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.job_messages l
                                  WHERE l.queue = v_queue AND drainpipe.job_key(l.payload) = c0.k
                                    AND l.state = 'leased' AND l.visible_at > p_now
                                  LIMIT p_flow.key_concurrency) s) END AS leased,
                         CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.flow_claims r
                                  WHERE r.queue = v_queue AND r.key = c0.k
                                    AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                  LIMIT p_flow.key_rate_count) s) END AS claimed,
                         CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                             SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                    FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                            FROM drainpipe.job_messages x
                           WHERE x.queue = v_queue AND x.finished_at IS NULL
                             AND x.visible_at <= p_now AND x.attempts < x.max_attempts
                             AND (x.visible_at, x.id) > (v_after_at, v_after_id)
                           ORDER BY x.visible_at, x.id
                           LIMIT v_chunk) c0
                  OFFSET 0) c
             -- the lock, row by row as candidates fit: a row another transaction
             -- holds is skipped, and one changed since is read as it is now
             CROSS JOIN LATERAL (
                  SELECT z.state FROM drainpipe.job_messages z
                   WHERE z.id = c.id AND z.finished_at IS NULL AND z.visible_at <= p_now
                     AND z.attempts < z.max_attempts
                     FOR UPDATE SKIP LOCKED) y
             WHERE c.k IS NULL
                OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                    AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                    -- ordered: only the first live job of its key (by id), one per claim
                    AND (NOT p_flow.ordered
                         OR (c.picked = 0 AND NOT EXISTS (
                                SELECT 1 FROM drainpipe.job_messages e
                                 WHERE e.queue = v_queue AND drainpipe.job_key(e.payload) = c.k
                                   AND e.finished_at IS NULL AND e.id < c.id
                                   AND drainpipe.job_key(e.payload) IS NOT NULL))))
             LIMIT v_limit
            LOOP
                v_rows := v_rows + 1;
                v_last_at := v_r.visible_at;
                v_last_id := v_r.id;
                IF v_r.k = ANY (v_keys) THEN
                    -- a key this claim took already, in this pass too: counted exactly
                    v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                    CONTINUE WHEN p_flow.ordered
                        OR (p_flow.key_concurrency IS NOT NULL
                            AND v_r.leased + v_taken >= p_flow.key_concurrency)
                        OR (p_flow.key_rate_count IS NOT NULL
                            AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                END IF;
                ids := ids || v_r.id;
                v_keys := v_keys || v_r.k;
                lapsed := lapsed OR v_r.state = 'leased';
                v_room := v_room - 1;
            END LOOP;
        ELSE
            -- the same pass along the level's range of job_messages_priority_idx (jobs 0017)
            FOR v_r IN
            SELECT c.id, c.visible_at, c.k, c.leased, c.claimed, c.picked, y.state
              FROM (
                  SELECT c0.*,
                         CASE WHEN p_flow.key_concurrency IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.job_messages l
                                  WHERE l.queue = v_queue AND drainpipe.job_key(l.payload) = c0.k
                                    AND l.state = 'leased' AND l.visible_at > p_now
                                  LIMIT p_flow.key_concurrency) s) END AS leased,
                         CASE WHEN p_flow.key_rate_count IS NULL OR c0.k IS NULL THEN 0 ELSE (
                             SELECT count(*) FROM (
                                 SELECT 1 FROM drainpipe.flow_claims r
                                  WHERE r.queue = v_queue AND r.key = c0.k
                                    AND r.claimed_at > p_now - make_interval(secs => p_flow.key_rate_per)
                                  LIMIT p_flow.key_rate_count) s) END AS claimed,
                         CASE WHEN cardinality(v_keys) = 0 THEN 0 ELSE (
                             SELECT count(*) FROM unnest(v_keys) p WHERE p = c0.k) END AS picked
                    FROM (SELECT x.id, x.visible_at, drainpipe.job_key(x.payload) AS k
                            FROM drainpipe.job_messages x
                           -- the level's range after the last place read, as row
                           -- comparisons: only the priority index serves them
                           WHERE x.queue = v_queue
                             AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                                     > (v_level, v_after_at, v_after_id)
                             AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                             AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                           ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                           LIMIT v_chunk) c0
                  OFFSET 0) c
             CROSS JOIN LATERAL (
                  SELECT z.state FROM drainpipe.job_messages z
                   WHERE z.id = c.id AND z.finished_at IS NULL AND z.visible_at <= p_now
                     AND z.attempts < z.max_attempts
                     FOR UPDATE SKIP LOCKED) y
             WHERE c.k IS NULL
                OR ((p_flow.key_concurrency IS NULL OR c.leased + c.picked < p_flow.key_concurrency)
                    AND (p_flow.key_rate_count IS NULL OR c.claimed + c.picked < p_flow.key_rate_count)
                    AND (NOT p_flow.ordered
                         OR (c.picked = 0 AND NOT EXISTS (
                                SELECT 1 FROM drainpipe.job_messages e
                                 WHERE e.queue = v_queue AND drainpipe.job_key(e.payload) = c.k
                                   AND e.finished_at IS NULL AND e.id < c.id
                                   AND drainpipe.job_key(e.payload) IS NOT NULL))))
             LIMIT v_limit
            LOOP
                v_rows := v_rows + 1;
                v_last_at := v_r.visible_at;
                v_last_id := v_r.id;
                IF v_r.k = ANY (v_keys) THEN
                    -- a key this claim took already, in this pass too: counted exactly
                    v_taken := (SELECT count(*) FROM unnest(v_keys) p WHERE p = v_r.k);
                    CONTINUE WHEN p_flow.ordered
                        OR (p_flow.key_concurrency IS NOT NULL
                            AND v_r.leased + v_taken >= p_flow.key_concurrency)
                        OR (p_flow.key_rate_count IS NOT NULL
                            AND v_r.claimed + v_taken >= p_flow.key_rate_count);
                END IF;
                ids := ids || v_r.id;
                v_keys := v_keys || v_r.k;
                lapsed := lapsed OR v_r.state = 'leased';
                v_room := v_room - 1;
            END LOOP;
        END IF;
        EXIT WHEN v_room = 0;
        v_scanned := v_scanned + v_chunk;
        IF v_rows = v_limit THEN
            -- a full pass with rows over their key's limit: on after the last it returned
            v_after_at := v_last_at;
            v_after_id := v_last_id;
        ELSE
            -- a short pass read its whole chunk: where did the chunk end?
            v_last_at := NULL;
            IF v_level IS NULL THEN
                SELECT x.visible_at, x.id INTO v_last_at, v_last_id
                  FROM drainpipe.job_messages x
                 WHERE x.queue = v_queue AND x.finished_at IS NULL
                   AND x.visible_at <= p_now AND x.attempts < x.max_attempts
                   AND (x.visible_at, x.id) > (v_after_at, v_after_id)
                 ORDER BY x.visible_at, x.id
                OFFSET v_chunk - 1 LIMIT 1;
            ELSE
                SELECT x.visible_at, x.id INTO v_last_at, v_last_id
                  FROM drainpipe.job_messages x
                 WHERE x.queue = v_queue
                   AND (drainpipe.job_priority(x.payload), x.visible_at, x.id)
                           > (v_level, v_after_at, v_after_id)
                   AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                   AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                 ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                OFFSET v_chunk - 1 LIMIT 1;
            END IF;
            IF v_last_at IS NULL THEN
                -- the chunk held every candidate left: the next level from its start, if any
                EXIT WHEN v_level IS NULL OR v_level = p_levels[cardinality(p_levels)];
                v_level := p_levels[array_position(p_levels, v_level) + 1];
                v_after_at := '-infinity';
                v_after_id := 0;
            ELSE
                v_after_at := v_last_at;
                v_after_id := v_last_id;
                v_chunk := v_chunk * 4;
            END IF;
        END IF;
        EXIT WHEN v_scanned >= v_bound;
        v_chunk := least(v_chunk, v_bound - v_scanned);
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_policy_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'on'
 SET jit TO 'off'
AS $function$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.queue, count(*) AS added, max(drainpipe.policy_payload_size(a.payload)) AS largest,
               max(a.visible_at) AS latest
          FROM added a
         WHERE a.queue IN (SELECT p.queue FROM drainpipe.queue_policies p)
         GROUP BY a.queue
    LOOP
        PERFORM drainpipe.check_policy_insert(r.queue, r.added, r.largest, r.latest);
    END LOOP;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_policy_lease()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'on'
 SET jit TO 'off'
AS $function$
DECLARE
    v_max double precision;
    v_from timestamptz;
BEGIN
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = NEW.queue;
    IF v_max IS NULL THEN
        RETURN NEW;
    END IF;
    v_from := CASE WHEN NEW.attempts > OLD.attempts THEN NEW.started_at
                   ELSE greatest(clock_timestamp(), NEW.started_at) END;
    IF NEW.visible_at > v_from + make_interval(secs => v_max + 1) THEN
        RAISE EXCEPTION 'a lease of % s is longer than queue "%"''s max_lease of % s',
            round(extract(epoch FROM NEW.visible_at - v_from)::numeric, 3), NEW.queue, v_max
            USING ERRCODE = 'DPQ03';
    END IF;
    RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_messages_priority_pick(p_queue text, p_levels integer[], p_batch integer, p_now timestamp with time zone, p_bound boolean)
 RETURNS bigint[]
 LANGUAGE plpgsql
AS $function$
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
                       THEN drainpipe.claim_bound(drainpipe.priority_bound_name(p_queue, v_level), p_now)
                       ELSE '-infinity' END;
        LOOP
            SELECT array_agg(p.id), min(p.visible_at) INTO v_take, v_first
              FROM (
                  SELECT x.id, x.visible_at
                    FROM drainpipe.job_messages x
                   -- the level's range, [v_from, p_now], as row comparisons: only the
                   -- priority index serves them (a generic plan would otherwise read the
                   -- live index and filter by level)
                   WHERE x.queue = p_queue
                     AND (drainpipe.job_priority(x.payload), x.visible_at) >= (v_level, v_from)
                     AND (drainpipe.job_priority(x.payload), x.visible_at) <= (v_level, p_now)
                     AND x.finished_at IS NULL AND x.attempts < x.max_attempts
                   ORDER BY drainpipe.job_priority(x.payload), x.visible_at, x.id
                   LIMIT v_need
                     FOR UPDATE SKIP LOCKED
              ) p;
            EXIT WHEN v_from = '-infinity' OR coalesce(cardinality(v_take), 0) >= v_need;
            v_from := '-infinity';  -- short above the bound: this level from its start
        END LOOP;
        IF p_bound THEN
            PERFORM drainpipe.keep_claim_bound(drainpipe.priority_bound_name(p_queue, v_level),
                                               v_first, NULL);
        END IF;
        v_ids := v_ids || coalesce(v_take, '{}');
        EXIT WHEN cardinality(v_ids) >= p_batch;
    END LOOP;
    RETURN v_ids;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_priority(p_stored jsonb)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN p_stored @> '{"$dp": 1}' AND jsonb_typeof(p_stored -> 'priority') = 'number'
                THEN greatest(-100, least(100, (p_stored ->> 'priority')::numeric::integer))
                ELSE 0 END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_due(p_queue text, p_now timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT count(*) FROM drainpipe.job_messages j
     WHERE j.queue = p_queue AND j.finished_at IS NULL
       AND j.visible_at <= p_now AND j.attempts < j.max_attempts
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_holds_v1(p_queues text[])
 RETURNS TABLE(queue text, paused boolean, held jsonb)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_overview_v1(p_queues text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(queue text, counts jsonb, ready bigint, oldest_ready_age_s double precision, paused boolean, series jsonb)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
        -- the live jobs in one pass over their index range: counts by state, the ready
        -- ones and the oldest of them, and those enqueued in the last hour by minute
        SELECT jsonb_build_object('queued', sum(g.queued), 'leased', sum(g.leased),
                                  'retry_wait', sum(g.retry_wait), 'dead', sum(g.dead)),
               coalesce(sum(g.ready), 0),
               extract(epoch FROM v_now - min(g.oldest))::double precision,
               coalesce(jsonb_object_agg(extract(epoch FROM g.minute)::bigint::text, g.n)
                            FILTER (WHERE g.minute IS NOT NULL), '{}'::jsonb)
          INTO v_live, ready, oldest_ready_age_s, v_enqueued
          FROM (SELECT CASE WHEN l.enqueued_at >= v_from THEN date_trunc('minute', l.enqueued_at) END AS minute,
                       count(*) AS n,
                       count(*) FILTER (WHERE l.state = 'queued') AS queued,
                       count(*) FILTER (WHERE l.state = 'leased') AS leased,
                       count(*) FILTER (WHERE l.state = 'retry_wait') AS retry_wait,
                       count(*) FILTER (WHERE l.state = 'dead') AS dead,
                       count(*) FILTER (WHERE l.ready) AS ready,
                       min(l.visible_at) FILTER (WHERE l.ready) AS oldest
                  FROM (SELECT m.visible_at, m.enqueued_at,
                               drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, v_now) AS state,
                               m.visible_at <= v_now AND m.attempts < m.max_attempts AS ready
                          FROM drainpipe.job_messages m
                         WHERE m.queue = v_queue AND m.finished_at IS NULL) l
                 GROUP BY 1) g;
        -- the finished: the totals the triggers keep (35_totals)
        SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb) INTO v_done
          FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                 WHERE t.queue = v_queue GROUP BY t.state) s;
        -- dead from the live rows (a last lease that ran out) adds to the finished dead
        counts := jsonb_build_object(
            'queued', coalesce((v_live ->> 'queued')::bigint, 0),
            'leased', coalesce((v_live ->> 'leased')::bigint, 0),
            'retry_wait', coalesce((v_live ->> 'retry_wait')::bigint, 0),
            'succeeded', coalesce((v_done ->> 'succeeded')::bigint, 0),
            'dead', coalesce((v_done ->> 'dead')::bigint, 0) + coalesce((v_live ->> 'dead')::bigint, 0),
            'cancelled', coalesce((v_done ->> 'cancelled')::bigint, 0));
        SELECT coalesce(jsonb_object_agg(extract(epoch FROM e.minute)::bigint::text, e.n), '{}'::jsonb)
          INTO v_enqueued_done
          FROM (SELECT date_trunc('minute', f.enqueued_at) AS minute, count(*) AS n
                  FROM drainpipe.job_messages f
                 WHERE f.queue = v_queue AND f.finished_at >= v_from AND f.enqueued_at >= v_from
                 GROUP BY 1) e;
        SELECT coalesce(jsonb_object_agg(extract(epoch FROM s.minute)::bigint::text, s.n), '{}'::jsonb)
          INTO v_succeeded
          FROM (SELECT date_trunc('minute', f.finished_at) AS minute, count(*) AS n
                  FROM drainpipe.job_messages f
                 WHERE f.queue = v_queue AND f.finished_at >= v_from AND f.state = 'succeeded'
                 GROUP BY 1) s;
        series := drainpipe.overview_series(v_queue, v_now, v_enqueued, v_enqueued_done, v_succeeded);
        paused := EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = v_queue);
        RETURN NEXT;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v1(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.oldest_age_seconds
      FROM drainpipe.job_queue_stats_v2(p_queues) s
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v2(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v2
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT q.name,
           coalesce(live.ready, 0),
           coalesce(live.in_flight, 0),
           coalesce(live.delayed, 0),
           coalesce(live.exhausted, 0)
             + (SELECT count(*) FROM drainpipe.job_messages d
                 WHERE d.queue = q.name AND d.state = 'dead' AND d.replayed_by IS NULL),
           coalesce(done.succeeded, 0),
           coalesce(done.cancelled, 0),
           extract(epoch FROM clock_timestamp() - live.oldest)::double precision
      FROM unnest(p_queues) AS q(name)
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts < m.max_attempts) AS ready,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts > 0) AS in_flight,
                 count(*) FILTER (WHERE m.visible_at > clock_timestamp() AND m.attempts = 0) AS delayed,
                 count(*) FILTER (WHERE m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts) AS exhausted,
                 min(m.enqueued_at) FILTER (WHERE NOT (m.visible_at <= clock_timestamp() AND m.attempts >= m.max_attempts)) AS oldest
            FROM drainpipe.job_messages m
           WHERE m.queue = q.name AND m.finished_at IS NULL
      ) live ON true
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE f.state = 'succeeded') AS succeeded,
                 count(*) FILTER (WHERE f.state = 'cancelled') AS cancelled
            FROM drainpipe.job_messages f
           WHERE f.queue = q.name AND f.finished_at IS NOT NULL
      ) done ON true
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v3(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v3
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.queue, s.ready, s.in_flight, s.delayed, s.dead, s.succeeded, s.cancelled,
           s.oldest_age_seconds,
           EXISTS (SELECT 1 FROM drainpipe.queue_pauses p WHERE p.queue = s.queue)
      FROM drainpipe.job_queue_stats_v2(p_queues) s
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_queue_stats_v4(p_queues text[])
 RETURNS SETOF drainpipe.job_queue_stats_v4
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
      FROM drainpipe.job_queue_stats_v3(p_queues) s
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_records_at(p_queue text, p_state text, p_tenant text, p_limit integer, p_before_id bigint, p_id bigint, p_now timestamp with time zone)
 RETURNS TABLE(id bigint, queue text, state text, stored_state text, attempts integer, max_attempts integer, tenant text, dedupe_key text, enqueued_at timestamp with time zone, eligible_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, lease_end timestamp with time zone, last_code text, parent_id bigint, replayed_by bigint, now timestamp with time zone)
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
RETURN QUERY SELECT s.id, s.queue, s.read_state, s.state, s.attempts, s.max_attempts, s.tenant,
           s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.visible_at,
           CASE WHEN s.read_state = s.state THEN s.last_code
                WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS'
                ELSE 'LEASE_EXPIRED' END,
           s.parent_id, s.replayed_by, p_now
      FROM (
          SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                 m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                 m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                 drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS read_state
            FROM drainpipe.job_messages m
           WHERE (p_id IS NULL OR m.id = p_id)
             AND (p_queue IS NULL OR m.queue = p_queue)
             AND (p_before_id IS NULL OR m.id < p_before_id)
             AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
             -- a stored state that can read as the one asked for
             AND (p_state IS NULL OR m.state = p_state
                  OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
           ORDER BY m.id DESC
      ) s
     WHERE p_state IS NULL OR s.read_state = p_state
     LIMIT greatest(coalesce(p_limit, 100), 1)
;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_records_newest(p_queue text, p_state text, p_tenant text, p_limit integer, p_before_at timestamp with time zone, p_before_id bigint, p_now timestamp with time zone)
 RETURNS TABLE(id bigint, queue text, state text, attempts integer, max_attempts integer, tenant text, dedupe_key text, enqueued_at timestamp with time zone, eligible_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, last_code text, parent_id bigint, replayed_by bigint)
 LANGUAGE plpgsql
 STABLE
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v_window interval := drainpipe.job_stamp_window();
    v_limit integer := greatest(coalesce(p_limit, 100), 1);
    v_before_id bigint := coalesce(p_before_id, 0);
    v_top bigint;    -- the walk reads the ids below this one (NULL: from the newest)
    v_low bigint;    -- and down to this one (NULL: to the oldest)
    v_chunk integer := 2 * v_limit + 64;
    v_read integer;
    v_last bigint;
    v_bound timestamptz;
    v_newest timestamptz[] := '{}';  -- the stamps of the newest rows for the page so far
BEGIN
    IF p_before_at IS NOT NULL THEN
        -- a row a window newer than the cursor: every row above it is newer than the cursor
        SELECT m.id INTO v_top FROM drainpipe.job_messages m
         WHERE m.id > v_before_id AND m.enqueued_at >= p_before_at + v_window
         ORDER BY m.id LIMIT 1;
    END IF;
    v_low := v_top;
    LOOP
        SELECT count(*)::integer, min(w.id),
               ARRAY(SELECT x FROM unnest(v_newest || array_agg(w.enqueued_at) FILTER (WHERE w.fits)) x
                      ORDER BY x DESC LIMIT v_limit)
          INTO v_read, v_last, v_newest
          FROM (SELECT m.id, m.enqueued_at,
                       (p_queue IS NULL OR m.queue = p_queue)
                       AND (p_before_at IS NULL OR (m.enqueued_at, m.id) < (p_before_at, v_before_id))
                       AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
                       AND (p_state IS NULL
                            OR drainpipe.job_state_at(m.state, m.visible_at, m.attempts,
                                                      m.max_attempts, p_now) = p_state) AS fits
                  FROM drainpipe.job_messages m
                 WHERE v_low IS NULL OR m.id < v_low
                 ORDER BY m.id DESC
                 LIMIT v_chunk) w;
        IF v_read < v_chunk THEN
            v_low := NULL;  -- the oldest row was read
            EXIT;
        END IF;
        v_low := v_last;
        IF cardinality(v_newest) >= v_limit THEN
            SELECT max(l.enqueued_at) INTO v_bound
              FROM (SELECT m.enqueued_at FROM drainpipe.job_messages m
                     WHERE m.id >= v_last ORDER BY m.id LIMIT 16) l;
            EXIT WHEN v_newest[v_limit] >= v_bound + v_window;
            v_chunk := 64 + v_limit / 4;  -- the page is found: only its last window is left
        ELSE
            v_chunk := least(v_chunk * 2, 100000);
        END IF;
    END LOOP;

    -- the page: the rows read, sorted (the tenant read from the payload for these only)
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts,
           drainpipe.job_tenant(s.payload), s.dedupe_key, s.enqueued_at, s.eligible_at,
           s.started_at, s.finished_at, s.last_code, s.parent_id, s.replayed_by
      FROM (
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, s.payload, s.dedupe_key,
           s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END AS eligible_at,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END AS finished_at,
           CASE WHEN s.read_state = s.state THEN s.last_code
                WHEN s.read_state = 'dead' THEN 'MAX_ATTEMPTS'
                ELSE 'LEASE_EXPIRED' END AS last_code,
           s.parent_id, s.replayed_by
      FROM (
          SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                 m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                 m.parent_id, m.replayed_by, m.payload,
                 drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, p_now) AS read_state
            FROM drainpipe.job_messages m
           WHERE (v_top IS NULL OR m.id < v_top)
             AND (v_low IS NULL OR m.id >= v_low)
             AND (p_queue IS NULL OR m.queue = p_queue)
             AND (p_before_at IS NULL OR (m.enqueued_at, m.id) < (p_before_at, v_before_id))
             AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
             -- a stored state that can read as the one asked for
             AND (p_state IS NULL OR m.state = p_state
                  OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
           ORDER BY m.enqueued_at DESC, m.id DESC
      ) s
     WHERE p_state IS NULL OR s.read_state = p_state
     LIMIT v_limit) s;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_result_v1(p_queue text, p_id bigint)
 RETURNS TABLE(kept boolean, result jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT count(s.*) > 0, (array_agg(s.result))[1] FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number = 0
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_retry_delay(p_attempt integer)
 RETURNS double precision
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT 1 + floor(random() * least(3600, 10 * power(2, least(greatest(p_attempt, 1) - 1, 20))))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_stamp(p_sequence regclass)
 RETURNS drainpipe.job_stamp_v1
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_stamp_window()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT interval '1 millisecond' $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_state_at(p_state text, p_lease_end timestamp with time zone, p_attempts integer, p_max_attempts integer, p_now timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN p_state = 'leased' AND p_lease_end <= p_now
                THEN CASE WHEN p_attempts >= p_max_attempts THEN 'dead' ELSE 'retry_wait' END
                ELSE p_state END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_steps_v1(p_queue text, p_id bigint)
 RETURNS TABLE(number integer, name text, state text, result jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.number, s.name, s.state, s.result FROM drainpipe.job_steps s
     WHERE s.queue = p_queue AND s.job_id = p_id AND s.number > 0
     ORDER BY s.number
$function$;

CREATE OR REPLACE FUNCTION drainpipe.job_tenant(p_stored jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT CASE WHEN p_stored @> '{"$dp": 1}' THEN p_stored #>> '{context,tenant}' END $function$;

CREATE OR REPLACE FUNCTION drainpipe.job_workflow_v1(p_queue text, p_id bigint)
 RETURNS jsonb
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
      ) s ON true
$function$;

CREATE OR REPLACE FUNCTION drainpipe.join_jobs_v1(p_queue text, p_id bigint, p_attempt integer, p_child_queue text, p_ids bigint[], p_number integer, p_name text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.keep_claim_bound(p_queue text, p_first timestamp with time zone, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_first IS NOT NULL AND p_now IS NULL AND isfinite(p_first) THEN
        PERFORM set_config('drainpipe.claim_from.' || p_queue,
                           (extract(epoch FROM p_first) * 1000000)::bigint::text, false);
    END IF;
    RETURN p_first;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.keep_flow_leased(p_queue text, p_leased bigint)
 RETURNS void
 LANGUAGE sql
AS $function$
    SELECT set_config('drainpipe.flow_leased.' || p_queue, p_leased::text, false)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.kept_job_totals(p_queue text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM drainpipe.job_totals_kept k WHERE k.queue = p_queue)
                THEN coalesce((SELECT jsonb_object_agg(s.state, s.n)
                                 FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                                        WHERE t.queue = p_queue GROUP BY t.state) s), '{}'::jsonb)
           END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_dead_jobs_v1(p_queue text, p_max_rows integer DEFAULT 100, p_before_id bigint DEFAULT NULL::bigint)
 RETURNS SETOF drainpipe.dead_job_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT d.id, d.attempts, d.enqueued_at, d.finished_at,
           drainpipe.dead_job_message(d.payload, d.max_attempts, d.dedupe_key, d.last_error)
      FROM drainpipe.job_messages d
     WHERE d.queue = p_queue AND d.state = 'dead' AND d.replayed_by IS NULL
       AND (p_before_id IS NULL OR d.id < p_before_id)
     ORDER BY d.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v1(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_list_jobs_1(p_queue, p_state, p_tenant, p_limit,
                                                      p_before_id, p_before_queue, p_now) r))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v2(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_list_jobs_2(p_queue, p_state, p_tenant, p_limit,
                                                      p_before_at, p_before_id, p_before_queue,
                                                      p_now) r))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_management_audit_v1(p_target text, p_limit integer, p_before bigint DEFAULT NULL::bigint)
 RETURNS SETOF drainpipe.management_audit
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM drainpipe.management_audit AS a
    WHERE a.target = p_target AND (p_before IS NULL OR a.id < p_before)
    ORDER BY a.id DESC
    LIMIT least(greatest(p_limit, 1), 501)  -- one more than a page: is there a next?
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_management_audit_v2(p_target text, p_limit integer, p_before bigint DEFAULT NULL::bigint)
 RETURNS TABLE(id bigint, at timestamp with time zone, actor text, action text, queue text, job_id bigint, outcome text, code text, idempotency_key text, new_job_id bigint, detail jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT a.id, a.at, a.actor, a.action, a.queue, a.job_id, a.outcome, a.code,
           a.idempotency_key, a.new_job_id, a.detail
      FROM drainpipe.management_audit AS a
     WHERE a.target = p_target AND (p_before IS NULL OR a.id < p_before)
     ORDER BY a.id DESC
     LIMIT least(greatest(p_limit, 1), 501)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.list_schedules_v1(p_prefix text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text)
 RETURNS SETOF drainpipe.schedule_entry_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.name, s.cron, s.time_zone, s.queue, s.tenant, s.next_run, s.last_run,
           s.locked_until, s.created_at
      FROM drainpipe.job_schedules s
     -- starts_with, not LIKE: a prefix may contain % or _
     WHERE (p_prefix IS NULL OR starts_with(s.name, p_prefix))
       AND (p_tenant IS NULL OR s.tenant = p_tenant)
     ORDER BY s.name
$function$;

CREATE OR REPLACE FUNCTION drainpipe.live_job_payloads_v1(p_queue text, p_after bigint, p_limit integer)
 RETURNS TABLE(id bigint, payload jsonb)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT m.id, m.payload FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.id > coalesce(p_after, 0) AND m.finished_at IS NULL
     ORDER BY m.id LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.lock_job_event(p_event text, p_key text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT pg_advisory_xact_lock(hashtextextended('drainpipe.event:' || p_event || chr(1) || p_key, 0))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.note_job_priorities(p_queue text, p_stored jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.note_job_priority(p_queue text, p_level integer)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.overview_minutes(p_now timestamp with time zone)
 RETURNS SETOF timestamp with time zone
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT generate_series(date_trunc('minute', p_now) - interval '59 minutes',
                           date_trunc('minute', p_now), interval '1 minute')
$function$;

CREATE OR REPLACE FUNCTION drainpipe.overview_series(p_queue text, p_now timestamp with time zone, p_enqueued_live jsonb, p_enqueued_done jsonb, p_succeeded jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
      LEFT JOIN failed f ON f.minute = m.minute
$function$;

CREATE OR REPLACE FUNCTION drainpipe.park_job(p_queue text, p_id bigint, p_until timestamp with time zone, p_waiting_for text)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    UPDATE drainpipe.job_messages
       SET state = CASE WHEN p_waiting_for IS NULL THEN 'queued' ELSE 'waiting' END,
           visible_at = p_until,
           max_attempts = max_attempts + 1
     WHERE id = p_id AND queue = p_queue
$function$;

CREATE OR REPLACE FUNCTION drainpipe.pause_queue_v1(p_queue text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_added integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_pauses (queue, paused_at)
    VALUES (p_queue, coalesce(p_now, clock_timestamp()))
    ON CONFLICT (queue) DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    RETURN v_added > 0;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.paused_queues_v1(p_queues text[] DEFAULT NULL::text[])
 RETURNS SETOF text
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT p.queue FROM drainpipe.queue_pauses p
     WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
     ORDER BY p.queue
$function$;

CREATE OR REPLACE FUNCTION drainpipe.policy_payload_limit(p_policy drainpipe.queue_policies)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN p_policy.encrypt
                THEN ((p_policy.max_payload_bytes + 1024) * 4 / 3)::bigint + 64
                ELSE (p_policy.max_payload_bytes * 3 / 2)::bigint END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.policy_payload_size(p_stored jsonb)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE
        WHEN jsonb_typeof(p_stored) <> 'object' OR NOT p_stored ? '$dp' THEN octet_length(p_stored::text)
        WHEN p_stored ? 'sealed' THEN octet_length(p_stored ->> 'sealed')
        WHEN p_stored ? 'payload' THEN octet_length((p_stored -> 'payload')::text)
        ELSE octet_length(p_stored::text) END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.priority_bound_name(p_queue text, p_level integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT p_queue || CASE WHEN p_level < 0 THEN '__pm' ELSE '__p' END || abs(p_level)::text
$function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_job_archive_v1(p_queue text, p_older_than interval DEFAULT '7 days'::interval, p_batch integer DEFAULT 10000, p_dead_older_than interval DEFAULT '30 days'::interval)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_ids bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM drainpipe.job_messages d
         WHERE d.id = ANY (ARRAY(
               SELECT x.id FROM drainpipe.job_messages x
                WHERE x.queue = p_queue AND x.finished_at IS NOT NULL
                  AND x.finished_at < clock_timestamp() - least(p_older_than, p_dead_older_than)
                  AND x.finished_at < clock_timestamp()
                      - CASE WHEN x.state = 'dead' THEN p_dead_older_than ELSE p_older_than END
                ORDER BY x.finished_at
                LIMIT greatest(coalesce(p_batch, 10000), 1)))
        RETURNING d.queue, d.id
    ), attempts_gone AS (
        DELETE FROM drainpipe.job_attempts a USING gone g
         WHERE a.queue = g.queue AND a.job_id = g.id
    )
    SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM gone;
    PERFORM drainpipe.forget_job_steps(p_queue, v_ids);
    RETURN cardinality(v_ids);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_job_events_v1(p_older_than double precision DEFAULT 604800, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH gone AS (
        DELETE FROM drainpipe.job_events
         WHERE emitted_at < coalesce(p_now, clock_timestamp()) - make_interval(secs => p_older_than)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$function$;

CREATE OR REPLACE FUNCTION drainpipe.record_job_step_v1(p_queue text, p_id bigint, p_attempt integer, p_number integer, p_name text, p_state text, p_result jsonb, p_code text DEFAULT NULL::text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.recount_job_totals_v1(p_queues text[] DEFAULT NULL::text[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_total bigint;
BEGIN
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM drainpipe.job_totals;
    INSERT INTO drainpipe.job_totals (queue, state, shard, n)
    SELECT m.queue, m.state, 0, count(*) FROM drainpipe.job_messages m
     WHERE m.finished_at IS NOT NULL GROUP BY 1, 2;
    INSERT INTO drainpipe.job_totals_kept (queue)
    SELECT DISTINCT t.queue FROM drainpipe.job_totals t ON CONFLICT DO NOTHING;
    SELECT coalesce(sum(n), 0) INTO v_total FROM drainpipe.job_totals;
    RETURN v_total;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.refused_turn_rows(p_ids bigint[], p_attempts integer[], p_done bigint[])
 RETURNS SETOF drainpipe.job_turn_row_v1
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT f.id, f.attempt, NULL::timestamptz, NULL::timestamptz, NULL::jsonb,
           NULL::integer, NULL::text, true
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE f.id <> ALL (coalesce(p_done, '{}'::bigint[]))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v1(p_queue text, p_id bigint)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT drainpipe.replay_dead_job_v2(p_queue, p_id, NULL) $function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v2(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_new bigint;
    v_code text;
BEGIN
    SELECT r.new_job_id, r.code INTO v_new, v_code
      FROM drainpipe.replay_dead_job_v3(p_queue, p_id, NULL, true, p_now) AS r;
    IF v_code = 'EVENT_EXPIRED' THEN
        RAISE EXCEPTION 'job % of queue "%" is past its replay_window: its event is too old to replay',
            p_id, p_queue USING ERRCODE = 'DPR01';
    ELSIF v_code = 'REPLAY_BLOCKED' THEN
        RAISE EXCEPTION 'queue "%" does not allow replays (replayable = false)', p_queue
            USING ERRCODE = 'DPR02';
    END IF;
    RETURN v_new;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v3(p_queue text, p_id bigint, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(new_job_id bigint, code text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_rules record;
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_new bigint;
    v_at timestamptz;
BEGIN
    -- the policy row first (see replay_rules_in_force), then the job
    v_rules := drainpipe.replay_rules_in_force(p_queue, p_window, p_replayable);
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    END IF;
    IF v_job.replayed_by IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_ALREADY_REPLAYED'::text;
        RETURN;
    END IF;
    IF v_job.state = 'leased' AND v_job.visible_at <= v_now AND v_job.attempts >= v_job.max_attempts THEN
        -- dead already, not swept yet
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_job.visible_at, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        UPDATE drainpipe.job_messages
           SET state = 'dead', finished_at = v_job.visible_at, last_code = 'MAX_ATTEMPTS',
               last_error = 'The lease ran out on the last attempt'
         WHERE id = p_id;
    ELSIF v_job.state <> 'dead' THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_DEAD'::text;
        RETURN;
    END IF;
    code := drainpipe.replay_refusal(v_rules.replay_window, v_rules.replayable,
        CASE WHEN v_rules.replay_window IS NULL THEN NULL
             ELSE drainpipe.replay_origin(p_queue, p_id) END, v_now);
    IF code IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, code;
        RETURN;
    END IF;
    IF v_job.dedupe_key IS NULL THEN
        SELECT s.id, s.at INTO v_new, v_at FROM drainpipe.job_stamp('drainpipe.job_messages_id_seq') s;
        INSERT INTO drainpipe.job_messages (id, queue, payload, max_attempts, enqueued_at, visible_at, parent_id)
        OVERRIDING SYSTEM VALUE
        VALUES (v_new, p_queue, v_job.payload, v_job.max_attempts, v_at, clock_timestamp(), p_id);
    ELSE
        v_new := drainpipe.enqueue_keyed_job(p_queue, v_job.payload, 0, v_job.max_attempts,
                                             v_job.dedupe_key, true, p_id);
    END IF;
    UPDATE drainpipe.job_messages SET replayed_by = v_new WHERE id = p_id;
    RETURN QUERY SELECT v_new, NULL::text;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_origin(p_queue text, p_id bigint)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH RECURSIVE lineage (id, parent_id, enqueued_at, depth) AS (
        SELECT m.id, m.parent_id, m.enqueued_at, 1
          FROM drainpipe.job_messages AS m WHERE m.id = p_id AND m.queue = p_queue
        UNION ALL
        SELECT m.id, m.parent_id, m.enqueued_at, l.depth + 1
          FROM lineage AS l JOIN drainpipe.job_messages AS m
            ON m.id = l.parent_id AND m.queue = p_queue AND m.id < l.id
         WHERE l.depth < 1000
    )
    SELECT min(enqueued_at) FROM lineage
$function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_refusal(p_replay_window double precision, p_replayable boolean, p_origin timestamp with time zone, p_now timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE
        WHEN NOT coalesce(p_replayable, true) THEN 'REPLAY_BLOCKED'
        WHEN p_replay_window IS NOT NULL AND p_origin IS NOT NULL
             AND p_origin < p_now - make_interval(secs => p_replay_window) THEN 'EVENT_EXPIRED'
    END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.replay_rules_in_force(p_queue text, p_window double precision, p_replayable boolean, OUT replay_window double precision, OUT replayable boolean)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.resume_queue_v1(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_removed integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    DELETE FROM drainpipe.queue_pauses WHERE queue = p_queue;
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed > 0;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs_v1(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_batch integer DEFAULT 1000)
 RETURNS integer
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT count(*)::integer FROM drainpipe.retry_dead_jobs_v2(p_queue, p_ids, p_batch) AS r
     WHERE r.new_job_id IS NOT NULL AND r.code IS NULL
$function$;

CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs_v2(p_queue text, p_ids bigint[] DEFAULT NULL::bigint[], p_batch integer DEFAULT 1000, p_window double precision DEFAULT NULL::double precision, p_replayable boolean DEFAULT true, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(job_id bigint, new_job_id bigint, code text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.rewrite_job_payload_v1(p_queue text, p_id bigint, p_old jsonb, p_new jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    UPDATE drainpipe.job_messages SET payload = p_new
     WHERE id = p_id AND queue = p_queue AND payload = p_old AND finished_at IS NULL;
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.schedule_job_v1(p_name text, p_cron text, p_queue text, p_payload jsonb DEFAULT '{}'::jsonb, p_time_zone text DEFAULT 'UTC'::text, p_next_run timestamp with time zone DEFAULT NULL::timestamp with time zone, p_tenant text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_now timestamptz := date_trunc('milliseconds', clock_timestamp());
    v_next timestamptz := date_trunc('milliseconds', p_next_run);
    v_cron text := btrim(p_cron, E' \t\r\n');
BEGIN
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'Invalid schedule name %: 1 to 200 characters', p_name USING ERRCODE = '22023';
    END IF;
    PERFORM drainpipe.assert_schedule_form(p_cron);
    PERFORM drainpipe.assert_queue_name(p_queue);
    PERFORM drainpipe.assert_time_zone(p_time_zone);
    INSERT INTO drainpipe.job_schedules AS s
        (name, cron, time_zone, queue, payload, tenant, next_run, first_after)
    VALUES (p_name, v_cron, p_time_zone, p_queue, coalesce(p_payload, '{}'), p_tenant, v_next,
            CASE WHEN v_next IS NULL THEN v_now END)
    ON CONFLICT (name) DO UPDATE SET
        queue = excluded.queue,
        payload = excluded.payload,
        tenant = excluded.tenant,
        -- a new cron or zone frees the schedule, so a drain holding the old version cannot
        -- advance it; the same cron and zone (ensure_schedules at every deploy) keep the
        -- claim, or the run that drain is enqueueing would stay due and run twice
        locked_until = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                            THEN s.locked_until END,
        claim_token = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                           THEN s.claim_token END,
        next_run = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                        THEN s.next_run ELSE excluded.next_run END,
        first_after = CASE WHEN s.cron = excluded.cron AND s.time_zone = excluded.time_zone
                           THEN s.first_after ELSE excluded.first_after END,
        cron = excluded.cron,
        time_zone = excluded.time_zone;
    RETURN NULL;  -- the pg_cron scheduler returns its job id here
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.search_jobs_v1(p_queue text, p_state text, p_tenant text, p_code text, p_since timestamp with time zone, p_until timestamp with time zone, p_dedupe_key text, p_id bigint, p_limit integer, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_search_jobs(p_queue, p_state, p_tenant, p_code, p_since,
                                                      p_until, p_dedupe_key, p_id, p_limit,
                                                      p_before_id, p_before_queue, p_now) r))
$function$;

CREATE OR REPLACE FUNCTION drainpipe.set_job_parent(p_queue text, p_ids bigint[], p_parent bigint)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    UPDATE drainpipe.job_messages SET parent_id = p_parent WHERE id = ANY (p_ids) AND queue = p_queue
$function$;

CREATE OR REPLACE FUNCTION drainpipe.skip_job_v1(p_queue text, p_id bigint, p_attempt integer, p_code text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT drainpipe.is_job_code(p_code) THEN
        PERFORM drainpipe.assert_job_code(p_code);
    END IF;
    UPDATE drainpipe.job_messages
       SET state = 'succeeded', finished_at = coalesce(p_now, clock_timestamp()), last_code = p_code
     WHERE id = p_id AND queue = p_queue AND attempts = p_attempt AND state = 'leased';
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE drainpipe.job_attempts SET late_outcome = 'succeeded'
     WHERE queue = p_queue AND job_id = p_id AND number = p_attempt
       AND outcome = 'cancelled' AND late_outcome IS NULL;
    RETURN false;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.spawn_jobs_v1(p_queue text, p_id bigint, p_attempt integer, p_number integer, p_name text, p_child_queue text, p_payloads jsonb, p_delay double precision DEFAULT 0, p_max_attempts integer DEFAULT 5, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, ids bigint[])
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.suspend_job_v1(p_queue text, p_id bigint, p_attempt integer, p_delay double precision, p_waiting_for text DEFAULT NULL::text, p_number integer DEFAULT NULL::integer, p_name text DEFAULT NULL::text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.table_job_totals()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_rows jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', -c.n)) INTO v_rows
          FROM (SELECT g.queue, g.state, count(*) AS n FROM gone g
                 WHERE g.finished_at IS NOT NULL GROUP BY 1, 2) c;
    ELSE
        -- a claim or a heartbeat: no row of it is finished, and nothing is written
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', c.n)) INTO v_rows
          FROM (SELECT x.queue, x.state, sum(x.n) AS n
                  FROM (SELECT a.queue, a.state, 1 AS n FROM added a WHERE a.finished_at IS NOT NULL
                        UNION ALL
                        SELECT g.queue, g.state, -1 FROM gone g WHERE g.finished_at IS NOT NULL) x
                 GROUP BY 1, 2
                HAVING sum(x.n) <> 0) c;
    END IF;
    IF v_rows IS NOT NULL THEN
        PERFORM drainpipe.add_job_totals(v_rows);
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_get_job(p_queue text, p_id bigint, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by,
           drainpipe.job_history_v1(r.queue, r.id, r.attempts, r.stored_state, r.started_at,
                                    r.finished_at, r.lease_end, r.last_code, r.now)
      FROM drainpipe.job_records_at(p_queue, NULL::text, NULL::text, 1, NULL::bigint, p_id, coalesce(p_now, clock_timestamp())) r
$function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_list_jobs_1(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by, NULL::jsonb
      FROM drainpipe.job_records_at(p_queue, p_state, p_tenant, p_limit, p_before_id, NULL::bigint,
                                    coalesce(p_now, clock_timestamp())) r
$function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_list_jobs_2(p_queue text DEFAULT NULL::text, p_state text DEFAULT NULL::text, p_tenant text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT r.id, r.queue, r.state, r.attempts, r.max_attempts, NULL::timestamptz, r.tenant,
           r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at, r.finished_at, r.last_code,
           r.parent_id, r.replayed_by, NULL::jsonb
      FROM drainpipe.job_records_newest(p_queue, p_state, p_tenant, p_limit, p_before_at,
                                        p_before_id, coalesce(p_now, clock_timestamp())) r;
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.uncounted_search_jobs(p_queue text, p_state text, p_tenant text, p_code text, p_since timestamp with time zone, p_until timestamp with time zone, p_dedupe_key text, p_id bigint, p_limit integer, p_before_id bigint DEFAULT NULL::bigint, p_before_queue text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.job_record_v1
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET plan_cache_mode TO 'force_custom_plan'
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM drainpipe.assert_queue_name(p_queue);
    END IF;
    RETURN QUERY
    SELECT s.id, s.queue, s.read_state, s.attempts, s.max_attempts, NULL::timestamptz, s.tenant,
           s.dedupe_key, s.enqueued_at,
           CASE WHEN s.read_state IN ('queued', 'retry_wait') THEN s.visible_at END,
           s.started_at,
           CASE WHEN s.read_state = 'dead' AND s.finished_at IS NULL THEN s.visible_at
                ELSE s.finished_at END,
           s.read_code, s.parent_id, s.replayed_by, NULL::jsonb
      FROM (
          SELECT r.*,
                 CASE WHEN r.read_state = r.state THEN r.last_code
                      WHEN r.read_state = 'dead' THEN 'MAX_ATTEMPTS' ELSE 'LEASE_EXPIRED' END AS read_code
            FROM (
                SELECT m.id, m.queue, m.state, m.attempts, m.max_attempts, m.dedupe_key,
                       m.enqueued_at, m.visible_at, m.started_at, m.finished_at, m.last_code,
                       m.parent_id, m.replayed_by, drainpipe.job_tenant(m.payload) AS tenant,
                       drainpipe.job_state_at(m.state, m.visible_at, m.attempts, m.max_attempts, v_now) AS read_state
                  FROM drainpipe.job_messages m
                 WHERE (p_id IS NULL OR m.id = p_id)
                   AND (p_queue IS NULL OR m.queue = p_queue)
                   AND (p_before_id IS NULL OR m.id < p_before_id)
                   AND (p_dedupe_key IS NULL OR m.dedupe_key = p_dedupe_key)
                   AND (p_since IS NULL OR m.enqueued_at >= p_since)
                   AND (p_until IS NULL OR m.enqueued_at < p_until)
                   AND (p_tenant IS NULL OR drainpipe.job_tenant(m.payload) = p_tenant)
                   AND (p_state IS NULL OR m.state = p_state
                        OR (m.state = 'leased' AND p_state IN ('retry_wait', 'dead')))
                 ORDER BY m.id DESC
            ) r
      ) s
     WHERE (p_state IS NULL OR s.read_state = p_state)
       AND (p_code IS NULL OR s.read_code = p_code
            OR (s.read_code IN ('MAX_ATTEMPTS', 'DEADLINE_PASSED')
                AND (SELECT a.code FROM drainpipe.job_attempts a
                      WHERE a.queue = s.queue AND a.job_id = s.id AND a.code IS NOT NULL
                      ORDER BY a.number DESC LIMIT 1) = p_code))
     LIMIT greatest(coalesce(p_limit, 100), 1);
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_job_v1(p_name text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$function$;

CREATE OR REPLACE FUNCTION drainpipe.unschedule_tenant_v1(p_tenant text)
 RETURNS integer
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH gone AS (DELETE FROM drainpipe.job_schedules WHERE tenant = p_tenant RETURNING 1)
    SELECT count(*)::integer FROM gone
$function$;

CREATE OR REPLACE FUNCTION drainpipe.wait_job_event_v1(p_queue text, p_id bigint, p_attempt integer, p_event text, p_key text, p_timeout double precision, p_number integer, p_name text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(outcome text, data jsonb)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END
$function$;

CREATE OR REPLACE FUNCTION drainpipe.wake_job(p_queue text, p_id bigint, p_now timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    UPDATE drainpipe.job_messages
       SET state = 'queued', visible_at = least(visible_at, p_now)
     WHERE id = p_id AND queue = p_queue AND state = 'waiting' AND finished_at IS NULL;
    RETURN FOUND;
END
$function$;
