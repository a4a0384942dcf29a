-- drainpipe's rest-api module: schema drainpipe_api, jobs and schedules for PostgREST.
-- Expose the schema to PostgREST: Supabase dashboard → Project Settings → Data API →
-- Exposed schemas (add drainpipe_api), or in supabase/config.toml
--     [api]
--     schemas = ["public", "graphql_public", "drainpipe_api"]
-- (a PostgREST of your own: db-schemas). Until then PostgREST answers PGRST106.
-- The bodies name drainpipe functions of the jobs module, bound when called.
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

CREATE SCHEMA IF NOT EXISTS drainpipe_api;
COMMENT ON SCHEMA drainpipe_api IS
    'drainpipe over PostgREST: expose this schema (Supabase: Data API settings → Exposed schemas)';
ALTER DEFAULT PRIVILEGES IN SCHEMA drainpipe_api REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe_api.advance_schedule_v1(name text, ran timestamp with time zone, next_run timestamp with time zone, claim_token uuid, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.advance_schedule_v1($1, $2, $3, $4, $5) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.api_info_v1()
 RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('api', 1, 'jobs',
           (SELECT m.options FROM drainpipe.modules m WHERE m.name = 'jobs')) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.apply_retention_v1(min_interval double precision DEFAULT NULL::double precision, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.apply_job_retention_v1($1, 10000, $2) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.cancel_children_v1(queue text, id bigint)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.cancel_job_children_v1($1, $2) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.cancel_v1(queue text, id bigint, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.cancel_job_v1($1, $2, $3) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.child_outcomes_v1(queue text, ids bigint[])
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'state', c.state, 'last_code',
           c.last_code, 'kept', c.kept, 'result', c.result)), '[]'::jsonb)
      FROM drainpipe.child_outcomes_v1($1, $2) AS c $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.claim_due_schedules_v1(lease double precision DEFAULT 60, batch integer DEFAULT 100, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(to_jsonb(s)), '[]'::jsonb)
      FROM drainpipe.claim_due_schedules_v1($1, $2, $3) s $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.claim_v1(queue text, lease double precision DEFAULT 300, batch integer DEFAULT 1, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_array(j.id, j.attempts, j.enqueued_at, j.visible_until,
           j.payload, j.max_attempts, j.last_error)), '[]'::jsonb)
      FROM drainpipe.claim_jobs_v1($1, $2, $3, $4) j $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.complete_and_claim_v1(queue text, ids bigint[], attempts integer[], lease double precision DEFAULT 300, batch integer DEFAULT 1, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('refused', coalesce(jsonb_agg(t.id) FILTER (WHERE t.refused), '[]'::jsonb),
           'claimed', coalesce(jsonb_agg(jsonb_build_array(t.id, t.attempts, t.enqueued_at,
               t.visible_until, t.payload, t.max_attempts, t.last_error)) FILTER (WHERE NOT t.refused), '[]'::jsonb))
      FROM drainpipe.complete_and_claim_jobs_v1($1, $2, $3, $4, $5, $6) AS t $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.complete_many_v1(queue text, ids bigint[], attempts integer[], now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(c.id), '[]'::jsonb)
      FROM drainpipe.complete_jobs_v1($1, $2, $3, $4) AS c(id) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.complete_v1(queue text, id bigint, attempt integer, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.complete_job_v1($1, $2, $3, $4) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.emit_v1(event text, key text, data jsonb DEFAULT NULL::jsonb)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.emit_event_v1($1, $2, $3) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_flow_v1(queue text, payload jsonb, key text, debounce double precision DEFAULT NULL::double precision, throttle double precision DEFAULT NULL::double precision, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5, dedupe_key text DEFAULT NULL::text, dedupe_running boolean DEFAULT true)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.enqueue_flow_job_v1($1, $2, $6, $7, $8, $9, $3, $4, $5) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_many_v1(queue text, payloads jsonb, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(e.id ORDER BY e.n), '[]'::jsonb)
      FROM drainpipe.enqueue_jobs_v1($1, $2, $3, $4) WITH ORDINALITY AS e(id, n) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_v1(queue text, payload jsonb, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5, dedupe_key text DEFAULT NULL::text, dedupe_running boolean DEFAULT true)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.enqueue_job_v1($1, $2, $3, $4, $5, $6) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.ensure_policy_v3(queue text, max_payload_bytes integer DEFAULT NULL::integer, max_pending integer DEFAULT NULL::integer, lease double precision DEFAULT NULL::double precision, max_lease double precision DEFAULT NULL::double precision, max_delay double precision DEFAULT NULL::double precision, max_attempts integer DEFAULT NULL::integer, attempt_window double precision DEFAULT NULL::double precision, retention double precision DEFAULT NULL::double precision, encrypt boolean DEFAULT false, replay_window double precision DEFAULT NULL::double precision, replayable boolean DEFAULT true, concurrency integer DEFAULT NULL::integer, key_concurrency integer DEFAULT NULL::integer, rate_count integer DEFAULT NULL::integer, rate_per double precision DEFAULT NULL::double precision, key_rate_count integer DEFAULT NULL::integer, key_rate_per double precision DEFAULT NULL::double precision, ordered boolean DEFAULT false)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    BEGIN PERFORM drainpipe.ensure_queue_policy_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
           $12, $13, $14, $15, $16, $17, $18, $19); RETURN true; END $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.extend_many_v1(queue text, ids bigint[], attempts integer[], lease double precision, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(e.id), '[]'::jsonb)
      FROM drainpipe.extend_job_leases_v1($1, $2, $3, $4, $5) AS e(id) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.extend_v1(queue text, id bigint, attempt integer, lease double precision, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.extend_job_lease_v1($1, $2, $3, $4, $5) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.fail_coded_v1(queue text, id bigint, attempt integer, error text, retry_in double precision DEFAULT NULL::double precision, code text DEFAULT NULL::text, discard boolean DEFAULT false, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.fail_job_v2($1, $2, $3, $4, $5, $6, $7, $8) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.fail_v1(queue text, id bigint, attempt integer, error text, retry_in double precision DEFAULT NULL::double precision, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.fail_job_v2($1, $2, $3, $4, $5, 'HANDLER_ERROR', false, $6) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.flow_holds_v1(queues text[], ids bigint[])
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_array(h.queue, h.id, h.held_by)), '[]'::jsonb)
      FROM drainpipe.job_flow_holds_v1($1, $2) AS h $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.get_job_v1(queue text, id bigint, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT to_jsonb(r) FROM drainpipe.get_job_v1($1, $2, $3) r $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.job_workflow_v1(queue text, id bigint)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.job_workflow_v1($1, $2) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.join_v1(queue text, id bigint, attempt integer, child_queue text, ids bigint[], number integer, name text, started_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.join_jobs_v1($1, $2, $3, $4, $5, $6, $7, $8) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.list_dead_v1(queue text, max_rows integer DEFAULT 100, before_id bigint DEFAULT NULL::bigint)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(to_jsonb(d) ORDER BY d.n), '[]'::jsonb)
      FROM drainpipe.list_dead_jobs_v1($1, $2, $3) WITH ORDINALITY AS d(id, attempts,
           enqueued_at, died_at, message, n) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.list_jobs_v2(queue text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant text DEFAULT NULL::text, row_limit integer DEFAULT 100, before_at timestamp with time zone DEFAULT NULL::timestamp with time zone, before_id bigint DEFAULT NULL::bigint, before_queue text DEFAULT NULL::text, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(to_jsonb(r) - 'n' ORDER BY r.n), '[]'::jsonb)
      FROM drainpipe.list_jobs_v2($1, $2, $3, $4, $5, $6, $7, $8) WITH ORDINALITY AS r(id, queue,
           state, attempts, max_attempts, deadline, tenant, dedupe_key, enqueued_at, eligible_at,
           started_at, finished_at, last_code, parent_id, replayed_by, history, n) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.list_schedules_v1(prefix text DEFAULT NULL::text, tenant text DEFAULT NULL::text)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.name), '[]'::jsonb)
      FROM drainpipe.list_schedules_v1($1, $2) s $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.live_payloads_v1(queue text, after_id bigint DEFAULT 0, row_limit integer DEFAULT 100)
 RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', p.id, 'payload',
           p.payload) ORDER BY p.id), '[]'::jsonb)
      FROM drainpipe.live_job_payloads_v1($1, $2, $3) p $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.load_steps_v1(queue text, id bigint)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_object('number', s.number, 'name', s.name, 'state',
           s.state, 'result', s.result) ORDER BY s.number), '[]'::jsonb)
      FROM drainpipe.job_steps_v1($1, $2) AS s $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.pause_v1(queue text)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.pause_queue_v1($1) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.paused_v1(queues text[])
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(p.queue), '[]'::jsonb) FROM drainpipe.paused_queues_v1($1) AS p(queue) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.purge_archive_v1(queue text, older_than_seconds double precision DEFAULT 604800, dead_older_than_seconds double precision DEFAULT 2592000, batch integer DEFAULT 10000)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.purge_job_archive_v1($1, make_interval(secs => $2), $4,
           make_interval(secs => $3)) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.queue_holds_v1(queues text[])
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object(
           'paused', coalesce(jsonb_agg(h.queue ORDER BY h.queue) FILTER (WHERE h.paused), '[]'::jsonb),
           'held', coalesce(jsonb_object_agg(h.queue, h.held) FILTER (WHERE h.held <> '{}'::jsonb), '{}'::jsonb))
      FROM drainpipe.job_queue_holds_v1($1) h $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.record_step_v1(queue text, id bigint, attempt integer, number integer, name text, state text, result jsonb DEFAULT NULL::jsonb, code text DEFAULT NULL::text, started_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.record_job_step_v1($1, $2, $3, $4, $5, $6, $7, $8, $9) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.replay_v3(queue text, id bigint, replay_window double precision DEFAULT NULL::double precision, replayable boolean DEFAULT true)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('id', r.new_job_id, 'code', r.code)
      FROM drainpipe.replay_dead_job_v3($1, $2, $3, $4) AS r $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.result_v1(queue text, id bigint)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('kept', r.kept, 'result', r.result)
      FROM drainpipe.job_result_v1($1, $2) AS r $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.resume_v1(queue text)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.resume_queue_v1($1) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.retry_dead_v2(queue text, ids bigint[] DEFAULT NULL::bigint[], batch integer DEFAULT 1000, replay_window double precision DEFAULT NULL::double precision, replayable boolean DEFAULT true)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_agg(jsonb_build_array(r.job_id, r.new_job_id, r.code)), '[]'::jsonb)
      FROM drainpipe.retry_dead_jobs_v2($1, $2, $3, $4, $5) AS r $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.rewrite_payload_v1(queue text, id bigint, old_payload jsonb, new_payload jsonb)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.rewrite_job_payload_v1($1, $2, $3, $4) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.schedule_v1(name text, cron text, queue text, payload jsonb DEFAULT '{}'::jsonb, time_zone text DEFAULT 'UTC'::text, next_run timestamp with time zone DEFAULT NULL::timestamp with time zone, tenant text DEFAULT NULL::text)
 RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.schedule_job_v1($1, $2, $3, $4, $5, $6, $7) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.skip_v1(queue text, id bigint, attempt integer, code text, now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.skip_job_v1($1, $2, $3, $4, $5) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.spawn_v1(queue text, id bigint, attempt integer, number integer, name text, child_queue text, payloads jsonb, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5, started_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('outcome', s.outcome, 'ids', to_jsonb(s.ids))
      FROM drainpipe.spawn_jobs_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS s $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.stats_v4(queues text[])
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT coalesce(jsonb_object_agg(s.queue, jsonb_build_object('ready', s.ready,
           'in_flight', s.in_flight, 'delayed', s.delayed, 'dead', s.dead, 'succeeded', s.succeeded,
           'cancelled', s.cancelled, 'oldest_age_seconds', s.oldest_age_seconds,
           'paused', s.paused, 'held', s.held)), '{}'::jsonb)
      FROM drainpipe.job_queue_stats_v4($1) s $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.suspend_v1(queue text, id bigint, attempt integer, delay double precision, waiting_for text DEFAULT NULL::text, number integer DEFAULT NULL::integer, name text DEFAULT NULL::text, started_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.suspend_job_v1($1, $2, $3, $4, $5, $6, $7, $8) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.unschedule_tenant_v1(tenant text)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.unschedule_tenant_v1($1) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.unschedule_v1(name text)
 RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT drainpipe.unschedule_job_v1($1) $function$;

CREATE OR REPLACE FUNCTION drainpipe_api.wait_event_v1(queue text, id bigint, attempt integer, event text, key text, timeout double precision, number integer, name text, started_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jsonb LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT jsonb_build_object('outcome', w.outcome, 'data', w.data)
      FROM drainpipe.wait_job_event_v1($1, $2, $3, $4, $5, $6, $7, $8, $9) AS w $function$;

-- Privileges: the service role only
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM PUBLIC;
DO $privileges$
DECLARE
    api_role text;
BEGIN
    FOREACH api_role IN ARRAY ARRAY['anon', 'authenticated'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = api_role) THEN
            EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA drainpipe_api FROM %I', api_role);
            EXECUTE format('REVOKE ALL ON SCHEMA drainpipe_api FROM %I', api_role);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'service_role') THEN
        GRANT USAGE ON SCHEMA drainpipe_api TO service_role;
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA drainpipe_api TO service_role;
    END IF;
END
$privileges$;

-- PostgREST reads its schema cache once; tell a running one that the functions changed
NOTIFY pgrst, 'reload schema';

RESET check_function_bodies;
