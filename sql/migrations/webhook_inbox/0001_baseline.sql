-- drainpipe's webhook-inbox module: stored webhook messages and their processing.
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Row types
DO $types$
BEGIN
    IF to_regtype('drainpipe.webhook_receipt_v1') IS NULL THEN
        CREATE TYPE drainpipe.webhook_receipt_v1 AS (id bigint, duplicate boolean);
    END IF;
    IF to_regtype('drainpipe.webhook_row_v1') IS NULL THEN
        CREATE TYPE drainpipe.webhook_row_v1 AS (id bigint, source text, message_id text, event_type text, payload jsonb, headers jsonb, status text, attempts integer, max_attempts integer, available_at timestamp with time zone, locked_by text, locked_until timestamp with time zone, last_error text, received_at timestamp with time zone, processed_at timestamp with time zone, tenant text, checkpoint jsonb);
    END IF;
END
$types$;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.webhook_inbox (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    source text NOT NULL,
    message_id text NOT NULL,
    event_type text,
    payload jsonb NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 8 NOT NULL,
    available_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    locked_by text,
    locked_until timestamp with time zone,
    last_error text,
    received_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    processed_at timestamp with time zone,
    tenant text,
    checkpoint jsonb DEFAULT '{}'::jsonb NOT NULL,
    app text,
    verified boolean DEFAULT false NOT NULL,
    raw bytea,
    CONSTRAINT webhook_inbox_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_inbox_max_attempts CHECK ((max_attempts >= 1)),
    CONSTRAINT webhook_inbox_message_id_present CHECK ((message_id <> ''::text)),
    CONSTRAINT webhook_inbox_source_present CHECK ((source <> ''::text)),
    CONSTRAINT webhook_inbox_status CHECK ((status = ANY (ARRAY['pending'::text, 'processing'::text, 'processed'::text, 'dead'::text]))),
    CONSTRAINT webhook_inbox_tenant_present CHECK ((tenant <> ''::text))
);
CREATE INDEX IF NOT EXISTS webhook_inbox_exhausted_idx ON drainpipe.webhook_inbox USING btree (source, available_at) WHERE ((status = 'processing'::text) AND (attempts >= max_attempts));
CREATE UNIQUE INDEX IF NOT EXISTS webhook_inbox_message_idx ON drainpipe.webhook_inbox USING btree (source, COALESCE(tenant, ''::text), message_id);
CREATE INDEX IF NOT EXISTS webhook_inbox_processed_idx ON drainpipe.webhook_inbox USING btree (source, processed_at) WHERE (status = 'processed'::text);
CREATE INDEX IF NOT EXISTS webhook_inbox_ready_idx ON drainpipe.webhook_inbox USING btree (source, available_at, id) WHERE (status = ANY (ARRAY['pending'::text, 'processing'::text]));
CREATE INDEX IF NOT EXISTS webhook_inbox_tenant_idx ON drainpipe.webhook_inbox USING btree (tenant, source, received_at, id);
ALTER TABLE drainpipe.webhook_inbox SET (vacuum_index_cleanup=on, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=5000);
ALTER TABLE drainpipe.webhook_inbox ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.checkpoint_webhook_v1(p_id bigint, p_worker text, p_attempt integer, p_fields jsonb)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF jsonb_typeof(p_fields) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'A checkpoint is a JSON object, not %', coalesce(jsonb_typeof(p_fields), 'null')
            USING ERRCODE = '22023';
    END IF;
    UPDATE drainpipe.webhook_inbox w
       SET checkpoint = w.checkpoint || p_fields
     WHERE w.id = p_id AND w.status = 'processing'
       AND w.locked_by = p_worker AND w.attempts = p_attempt;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.claim_webhooks_v1(p_source text, p_worker text, p_batch integer DEFAULT 10, p_lease double precision DEFAULT 300, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.webhook_row_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' SET enable_bitmapscan TO 'off' AS $function$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    -- A message whose lease ran out on its last attempt is dead, not work to run again.
    UPDATE drainpipe.webhook_inbox w
       SET status = 'dead', last_error = 'The lease ran out on the last attempt',
           locked_by = NULL, locked_until = NULL
     -- = ANY (ARRAY(...)): primary-key lookups, not a semi join over the table
     WHERE w.id = ANY (ARRAY(
           SELECT x.id FROM drainpipe.webhook_inbox x
            WHERE x.source = p_source AND x.status = 'processing'
              AND x.available_at <= v_now AND x.attempts >= x.max_attempts
              FOR UPDATE SKIP LOCKED));
    RETURN QUERY
    WITH picked AS (
        -- oldest due first; rows another worker is claiming right now are skipped, not waited for
        SELECT x.id FROM drainpipe.webhook_inbox x
         WHERE x.source = p_source AND x.status IN ('pending', 'processing')
           AND x.available_at <= v_now AND x.attempts < x.max_attempts
         ORDER BY x.available_at, x.id
         LIMIT greatest(coalesce(p_batch, 10), 1)
           FOR UPDATE SKIP LOCKED
    )
    UPDATE drainpipe.webhook_inbox w
       SET status = 'processing',
           attempts = w.attempts + 1,
           locked_by = p_worker,
           locked_until = v_now + make_interval(secs => greatest(p_lease, 0)),
           available_at = v_now + make_interval(secs => greatest(p_lease, 0))
      FROM picked
     WHERE w.id = picked.id
    RETURNING w.id, w.source, w.message_id, w.event_type, w.payload, w.headers, w.status, w.attempts, w.max_attempts, w.available_at, w.locked_by, w.locked_until, w.last_error, w.received_at, w.processed_at, w.tenant, w.checkpoint;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_webhook_v1(p_id bigint, p_worker text, p_attempt integer)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
BEGIN
    UPDATE drainpipe.webhook_inbox w
       SET status = 'processed', processed_at = clock_timestamp(), last_error = NULL,
           locked_by = NULL, locked_until = NULL
     WHERE w.id = p_id AND w.status = 'processing'
       AND w.locked_by = p_worker AND w.attempts = p_attempt;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_webhooks_v1(p_ids bigint[], p_attempts integer[], p_worker text, p_lease double precision)
 RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    v_until timestamptz := clock_timestamp() + make_interval(secs => greatest(p_lease, 0));
BEGIN
    RETURN QUERY
    UPDATE drainpipe.webhook_inbox w
       SET locked_until = v_until,
           available_at = v_until
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE w.id = f.id AND w.status = 'processing'
       AND w.locked_by = p_worker AND w.attempts = f.attempt
    RETURNING w.id;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.fail_webhook_v1(p_id bigint, p_worker text, p_attempt integer, p_error text, p_retry_in double precision DEFAULT NULL::double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_seqscan TO 'off' AS $function$
DECLARE
    v_status text;
BEGIN
    UPDATE drainpipe.webhook_inbox w
       SET status = CASE WHEN w.attempts >= w.max_attempts THEN 'dead' ELSE 'pending' END,
           last_error = left(coalesce(p_error, 'null'), 4000),
           available_at = coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(
               coalesce(p_retry_in, least(3600, power(2, least(w.attempts, 12)))), 0)),
           locked_by = NULL, locked_until = NULL
     WHERE w.id = p_id AND w.status = 'processing'
       AND w.locked_by = p_worker AND w.attempts = p_attempt
    RETURNING w.status INTO v_status;
    RETURN v_status;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.list_webhooks_v1(p_tenant text, p_source text DEFAULT NULL::text, p_status text DEFAULT NULL::text, p_max_rows integer DEFAULT 100)
 RETURNS SETOF drainpipe.webhook_row_v1 LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'processing', 'processed', 'dead') THEN
        RAISE EXCEPTION 'Unknown webhook status "%"', p_status USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT w.id, w.source, w.message_id, w.event_type, w.payload, w.headers, w.status, w.attempts, w.max_attempts, w.available_at, w.locked_by, w.locked_until, w.last_error, w.received_at, w.processed_at, w.tenant, w.checkpoint
      FROM drainpipe.webhook_inbox w
     WHERE ((p_tenant IS NOT NULL AND w.tenant = p_tenant) OR (p_tenant IS NULL AND w.tenant IS NULL))
       AND (p_source IS NULL OR w.source = p_source)
       AND (p_status IS NULL OR w.status = p_status)
     ORDER BY w.received_at DESC, w.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_webhooks_v1(p_older_than double precision DEFAULT 2592000, p_include_dead boolean DEFAULT false, p_batch integer DEFAULT 10000, p_tenant text DEFAULT NULL::text, p_source text DEFAULT NULL::text)
 RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH gone AS (
        DELETE FROM drainpipe.webhook_inbox w
         WHERE w.id IN (
               SELECT x.id FROM drainpipe.webhook_inbox x
                WHERE (p_source IS NULL OR x.source = p_source)
                  AND (p_tenant IS NULL OR x.tenant = p_tenant)
                  AND ((x.status = 'processed'
                        AND x.processed_at < clock_timestamp() - make_interval(secs => greatest(p_older_than, 0)))
                    OR (p_include_dead AND x.status = 'dead'
                        AND x.received_at < clock_timestamp() - make_interval(secs => greatest(p_older_than, 0))))
                ORDER BY x.id
                LIMIT greatest(coalesce(p_batch, 10000), 1)
                  -- a message being changed right now is left for the next purge
                  FOR UPDATE SKIP LOCKED)
           -- re-checked on the locked row: a purge never deletes work that can still run
           AND w.status IN ('processed', 'dead')
        RETURNING 1
    )
    SELECT count(*)::integer FROM gone $function$;

CREATE OR REPLACE FUNCTION drainpipe.receive_webhook_v3(p_source text, p_message_id text, p_event_type text, p_payload jsonb, p_headers jsonb DEFAULT '{}'::jsonb, p_tenant text DEFAULT NULL::text, p_max_attempts integer DEFAULT NULL::integer, p_app text DEFAULT NULL::text, p_verified boolean DEFAULT false, p_raw bytea DEFAULT NULL::bytea)
 RETURNS SETOF drainpipe.webhook_receipt_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
#variable_conflict use_column
DECLARE
    v_tenant text := nullif(p_tenant, '');
    v_id bigint;
BEGIN
    IF coalesce(p_source, '') = '' OR coalesce(p_message_id, '') = '' THEN
        RAISE EXCEPTION 'A webhook needs a source and a message id' USING ERRCODE = '22023';
    END IF;
    FOR i IN 1..3 LOOP
        INSERT INTO drainpipe.webhook_inbox AS w
               (source, message_id, event_type, payload, headers, tenant, max_attempts, app,
                verified, raw)
        VALUES (p_source, p_message_id, p_event_type, coalesce(p_payload, 'null'::jsonb),
                coalesce(p_headers, '{}'::jsonb), v_tenant, greatest(coalesce(p_max_attempts, 8), 1),
                nullif(p_app, ''), coalesce(p_verified, false), p_raw)
        ON CONFLICT (source, (coalesce(tenant, '')), message_id) DO NOTHING
        RETURNING w.id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, false;
            RETURN;
        END IF;
        SELECT w.id INTO v_id FROM drainpipe.webhook_inbox w
         WHERE w.source = p_source AND coalesce(w.tenant, '') = coalesce(v_tenant, '')
           AND w.message_id = p_message_id;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'Could not store webhook % of %', p_message_id, p_source USING ERRCODE = '40001';
END $function$;

RESET check_function_bodies;
