-- rest-api v1: schema drainpipe_api, drainpipe's jobs and schedules shaped for PostgREST.
--
-- PostgREST calls a function of an exposed schema with POST /rest/v1/rpc/<function> and the
-- JSON body's keys as named arguments. These are thin wrappers over the drainpipe._v1
-- functions: plain argument names, one call per operation, batches as JSON arrays, rows as
-- JSON. They live in their own schema so that exposing it puts only these functions on the
-- Data API, never drainpipe's tables. Each runs as its owner (security definer) and is
-- executable by the service role only, like every drainpipe function.
--
-- Then expose the schema to PostgREST: Supabase dashboard → Project Settings → Data API →
-- Exposed schemas (add drainpipe_api), or in supabase/config.toml
--     [api]
--     schemas = ["public", "graphql_public", "drainpipe_api"]
-- (a PostgREST of your own: db-schemas). Until then PostgREST answers PGRST106.
--
-- The bodies name drainpipe functions of the jobs module; they are bound when called, so
-- this module installs before or after jobs (a call before jobs exists is NOT_INSTALLED).
SELECT set_config('check_function_bodies', 'off', true);

CREATE SCHEMA IF NOT EXISTS drainpipe_api;
COMMENT ON SCHEMA drainpipe_api IS
    'drainpipe over PostgREST: expose this schema (Supabase: Data API settings → Exposed schemas)';

-- What the caller checks first: this API's version and the jobs module's options.
CREATE OR REPLACE FUNCTION drainpipe_api.api_info_v1()
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'api', 1,
        'jobs', (SELECT m.options FROM drainpipe.modules m WHERE m.name = 'jobs')
    )
$$;

-- -- enqueue ------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_v1(
    queue text,
    payload jsonb,
    delay double precision DEFAULT 0,
    max_attempts integer DEFAULT 5,
    dedupe_key text DEFAULT NULL,
    dedupe_running boolean DEFAULT true
)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.enqueue_job_v1(
        enqueue_v1.queue, enqueue_v1.payload, enqueue_v1.delay, enqueue_v1.max_attempts,
        enqueue_v1.dedupe_key, enqueue_v1.dedupe_running
    )
$$;

-- the new ids as a JSON array, in the order of the payloads
CREATE OR REPLACE FUNCTION drainpipe_api.enqueue_many_v1(
    queue text, payloads jsonb, delay double precision DEFAULT 0, max_attempts integer DEFAULT 5
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(e.id ORDER BY e.n), '[]'::jsonb)
      FROM drainpipe.enqueue_jobs_v1(
               enqueue_many_v1.queue, enqueue_many_v1.payloads, enqueue_many_v1.delay,
               enqueue_many_v1.max_attempts
           ) WITH ORDINALITY AS e(id, n)
$$;

-- -- claim, settle, extend (each fenced by the claimed attempt) ----------------------------

-- the leased jobs as a JSON array of [id, attempts, enqueued_at, visible_until, payload,
-- max_attempts, last_error]: arrays, not objects, so a batch does not repeat the keys
CREATE OR REPLACE FUNCTION drainpipe_api.claim_v1(
    queue text, lease double precision DEFAULT 300, batch integer DEFAULT 1,
    now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
               jsonb_agg(jsonb_build_array(j.id, j.attempts, j.enqueued_at, j.visible_until,
                                           j.payload, j.max_attempts, j.last_error)),
               '[]'::jsonb)
      FROM drainpipe.claim_jobs_v1(claim_v1.queue, claim_v1.lease, claim_v1.batch, claim_v1.now) j
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.complete_v1(
    queue text, id bigint, attempt integer, now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.complete_job_v1(
        complete_v1.queue, complete_v1.id, complete_v1.attempt, complete_v1.now
    )
$$;

-- the ids completed, as a JSON array (the others' leases were lost)
CREATE OR REPLACE FUNCTION drainpipe_api.complete_many_v1(
    queue text, ids bigint[], attempts integer[], now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(c.id), '[]'::jsonb)
      FROM drainpipe.complete_jobs_v1(
               complete_many_v1.queue, complete_many_v1.ids, complete_many_v1.attempts,
               complete_many_v1.now
           ) AS c(id)
$$;

-- "queued", "dead", or null when the lease was lost
CREATE OR REPLACE FUNCTION drainpipe_api.fail_v1(
    queue text, id bigint, attempt integer, error text,
    retry_in double precision DEFAULT NULL, now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.fail_job_v1(
        fail_v1.queue, fail_v1.id, fail_v1.attempt, fail_v1.error, fail_v1.retry_in, fail_v1.now
    )
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.extend_v1(
    queue text, id bigint, attempt integer, lease double precision,
    now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.extend_job_lease_v1(
        extend_v1.queue, extend_v1.id, extend_v1.attempt, extend_v1.lease, extend_v1.now
    )
$$;

-- the ids still held (and now extended), as a JSON array
CREATE OR REPLACE FUNCTION drainpipe_api.extend_many_v1(
    queue text, ids bigint[], attempts integer[], lease double precision,
    now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(e.id), '[]'::jsonb)
      FROM drainpipe.extend_job_leases_v1(
               extend_many_v1.queue, extend_many_v1.ids, extend_many_v1.attempts,
               extend_many_v1.lease, extend_many_v1.now
           ) AS e(id)
$$;

-- -- stats, dead letters, replay, purge ------------------------------------------------------

-- {queue: {ready, in_flight, delayed, dead, oldest_age_seconds}}
CREATE OR REPLACE FUNCTION drainpipe_api.stats_v1(queues text[])
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
               jsonb_object_agg(s.queue, jsonb_build_object(
                   'ready', s.ready, 'in_flight', s.in_flight, 'delayed', s.delayed,
                   'dead', s.dead, 'oldest_age_seconds', s.oldest_age_seconds)),
               '{}'::jsonb)
      FROM drainpipe.job_queue_stats_v1(stats_v1.queues) s
$$;

-- dead letters newest first: [{id, attempts, enqueued_at, died_at, message}]
CREATE OR REPLACE FUNCTION drainpipe_api.list_dead_v1(
    queue text, max_rows integer DEFAULT 100, before_id bigint DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(to_jsonb(d) ORDER BY d.n), '[]'::jsonb)
      FROM drainpipe.list_dead_jobs_v1(
               list_dead_v1.queue, list_dead_v1.max_rows, list_dead_v1.before_id
           ) WITH ORDINALITY AS d(id, attempts, enqueued_at, died_at, message, n)
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.retry_dead_v1(
    queue text, ids bigint[] DEFAULT NULL, batch integer DEFAULT 1000
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.retry_dead_jobs_v1(retry_dead_v1.queue, retry_dead_v1.ids, retry_dead_v1.batch)
$$;

-- the new job's id, or null when the id is no dead letter of the queue
CREATE OR REPLACE FUNCTION drainpipe_api.replay_v1(queue text, id bigint)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.replay_dead_job_v1(replay_v1.queue, replay_v1.id)
$$;

-- ages in seconds: JSON has numbers, not intervals
CREATE OR REPLACE FUNCTION drainpipe_api.purge_archive_v1(
    queue text, older_than_seconds double precision DEFAULT 604800,
    dead_older_than_seconds double precision DEFAULT 2592000, batch integer DEFAULT 10000
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.purge_job_archive_v1(
        purge_archive_v1.queue,
        make_interval(secs => purge_archive_v1.older_than_seconds),
        purge_archive_v1.batch,
        make_interval(secs => purge_archive_v1.dead_older_than_seconds)
    )
$$;

-- -- schedules (both schedulers answer through the same drainpipe functions) ---------------

CREATE OR REPLACE FUNCTION drainpipe_api.schedule_v1(
    name text, cron text, queue text, payload jsonb DEFAULT '{}',
    time_zone text DEFAULT 'UTC', next_run timestamptz DEFAULT NULL, tenant text DEFAULT NULL
)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.schedule_job_v1(
        schedule_v1.name, schedule_v1.cron, schedule_v1.queue, schedule_v1.payload,
        schedule_v1.time_zone, schedule_v1.next_run, schedule_v1.tenant
    )
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.unschedule_v1(name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.unschedule_job_v1(unschedule_v1.name)
$$;

-- by name: [{name, cron, time_zone, queue, tenant, next_run, last_run, leased_until, created_at}]
CREATE OR REPLACE FUNCTION drainpipe_api.list_schedules_v1(
    prefix text DEFAULT NULL, tenant text DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.name), '[]'::jsonb)
      FROM drainpipe.list_schedules_v1(list_schedules_v1.prefix, list_schedules_v1.tenant) s
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.unschedule_tenant_v1(tenant text)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.unschedule_tenant_v1(unschedule_tenant_v1.tenant)
$$;

-- due schedules now leased to the caller:
-- [{name, cron, time_zone, queue, payload, next_run, first_after, claim_token}]
CREATE OR REPLACE FUNCTION drainpipe_api.claim_due_schedules_v1(
    lease double precision DEFAULT 60, batch integer DEFAULT 100, now timestamptz DEFAULT NULL
)
RETURNS jsonb
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(to_jsonb(s)), '[]'::jsonb)
      FROM drainpipe.claim_due_schedules_v1(
               claim_due_schedules_v1.lease, claim_due_schedules_v1.batch,
               claim_due_schedules_v1.now
           ) s
$$;

CREATE OR REPLACE FUNCTION drainpipe_api.advance_schedule_v1(
    name text, ran timestamptz, next_run timestamptz, claim_token uuid,
    now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT drainpipe.advance_schedule_v1(
        advance_schedule_v1.name, advance_schedule_v1.ran, advance_schedule_v1.next_run,
        advance_schedule_v1.claim_token, advance_schedule_v1.now
    )
$$;

-- -- privileges: the service role only --------------------------------------------------------

ALTER DEFAULT PRIVILEGES IN SCHEMA drainpipe_api REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
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

SELECT set_config('check_function_bodies', 'on', true);
