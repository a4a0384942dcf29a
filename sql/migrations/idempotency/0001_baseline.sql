-- drainpipe's idempotency module: idempotency keys and leases.
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Row types
DO $types$
BEGIN
    IF to_regtype('drainpipe.idempotency_begin_v1') IS NULL THEN
        CREATE TYPE drainpipe.idempotency_begin_v1 AS (state text, status integer, body bytea, content_type text, holder uuid);
    END IF;
END
$types$;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.idempotency_keys (
    scope text DEFAULT ''::text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    state text DEFAULT 'running'::text NOT NULL,
    response_status integer,
    response_body bytea,
    response_content_type text,
    holder uuid,
    locked_until timestamp with time zone,
    expires_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    completed_at timestamp with time zone,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idempotency_keys_key_length CHECK (((char_length(key) >= 1) AND (char_length(key) <= 255))),
    CONSTRAINT idempotency_keys_state CHECK ((state = ANY (ARRAY['running'::text, 'completed'::text]))),
    CONSTRAINT idempotency_keys_status CHECK (((response_status >= 100) AND (response_status <= 599)))
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_idx ON drainpipe.idempotency_keys USING btree (expires_at);
ALTER TABLE drainpipe.idempotency_keys ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.leases (
    scope text DEFAULT ''::text NOT NULL,
    key text NOT NULL,
    holder uuid NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    acquired_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT leases_pkey PRIMARY KEY (scope, key),
    CONSTRAINT leases_key_length CHECK (((char_length(key) >= 1) AND (char_length(key) <= 255)))
);
CREATE INDEX IF NOT EXISTS leases_expires_idx ON drainpipe.leases USING btree (expires_at);
ALTER TABLE drainpipe.leases ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.acquire_lease_v1(p_key text, p_seconds double precision DEFAULT 60, p_scope text DEFAULT ''::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_holder uuid;
BEGIN
    IF p_seconds IS NULL OR p_seconds <= 0 THEN
        RAISE EXCEPTION 'acquire_lease_v1: seconds must be positive';
    END IF;
    -- the conflict clause locks the row and re-checks expiry, so one caller wins a takeover
    INSERT INTO drainpipe.leases AS l (scope, key, holder, expires_at, acquired_at)
    VALUES (p_scope, p_key, gen_random_uuid(), v_now + make_interval(secs => p_seconds), v_now)
    ON CONFLICT ON CONSTRAINT leases_pkey DO UPDATE
       SET holder = excluded.holder, expires_at = excluded.expires_at, acquired_at = excluded.acquired_at
     WHERE l.expires_at <= v_now
    RETURNING l.holder INTO v_holder;
    RETURN v_holder;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.begin_idempotent_v1(p_scope text, p_key text, p_request_hash text, p_ttl double precision DEFAULT 86400, p_lock double precision DEFAULT 60, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.idempotency_begin_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_holder uuid := gen_random_uuid();
    v_row drainpipe.idempotency_keys;
BEGIN
    IF p_ttl IS NULL OR p_ttl <= 0 OR p_lock IS NULL OR p_lock <= 0 THEN
        RAISE EXCEPTION 'begin_idempotent_v1: ttl and lock must be positive seconds';
    END IF;
    IF p_request_hash IS NULL OR p_request_hash = '' THEN
        RAISE EXCEPTION 'begin_idempotent_v1: request hash must not be empty';
    END IF;
    -- A key released or expired between our insert and our select is gone: try again.
    -- Each round either inserts, reads a row, or saw that row vanish; three are plenty.
    FOR v_attempt IN 1..3 LOOP
        DELETE FROM drainpipe.idempotency_keys k
         WHERE k.scope = p_scope AND k.key = p_key AND k.expires_at <= v_now;
        -- waits for a concurrent insert of the same key, so exactly one caller starts
        INSERT INTO drainpipe.idempotency_keys (scope, key, request_hash, holder, locked_until, expires_at)
        VALUES (p_scope, p_key, p_request_hash, v_holder,
                v_now + make_interval(secs => p_lock), v_now + make_interval(secs => p_ttl))
        ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO NOTHING;
        IF FOUND THEN
            RETURN QUERY SELECT 'started'::text, NULL::integer, NULL::bytea, NULL::text, v_holder;
            RETURN;
        END IF;
        SELECT * INTO v_row FROM drainpipe.idempotency_keys k
         WHERE k.scope = p_scope AND k.key = p_key
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND OR v_row.expires_at <= v_now;
        IF v_row.request_hash <> p_request_hash THEN
            RETURN QUERY SELECT 'mismatch'::text, NULL::integer, NULL::bytea, NULL::text, NULL::uuid;
        ELSIF v_row.state = 'completed' THEN
            RETURN QUERY SELECT 'replay'::text, v_row.response_status, v_row.response_body,
                                v_row.response_content_type, NULL::uuid;
        ELSIF v_row.locked_until <= v_now THEN
            UPDATE drainpipe.idempotency_keys k
               SET holder = v_holder, locked_until = v_now + make_interval(secs => p_lock)
             WHERE k.scope = p_scope AND k.key = p_key;
            RETURN QUERY SELECT 'started'::text, NULL::integer, NULL::bytea, NULL::text, v_holder;
        ELSE
            RETURN QUERY SELECT 'running'::text, NULL::integer, NULL::bytea, NULL::text, NULL::uuid;
        END IF;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'begin_idempotent_v1: key % kept changing under us, retry', p_key
        USING ERRCODE = 'serialization_failure';
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.complete_idempotent_v1(p_scope text, p_key text, p_holder uuid, p_status integer, p_body bytea, p_content_type text DEFAULT NULL::text)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    UPDATE drainpipe.idempotency_keys k
       SET state = 'completed',
           response_status = p_status,
           response_body = p_body,
           response_content_type = p_content_type,
           locked_until = NULL,
           completed_at = clock_timestamp()
     WHERE k.scope = p_scope AND k.key = p_key AND k.holder = p_holder AND k.state = 'running';
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.extend_lease_v1(p_key text, p_holder uuid, p_seconds double precision DEFAULT 60, p_scope text DEFAULT ''::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    IF p_seconds IS NULL OR p_seconds <= 0 THEN
        RAISE EXCEPTION 'extend_lease_v1: seconds must be positive';
    END IF;
    UPDATE drainpipe.leases l
       SET expires_at = coalesce(p_now, clock_timestamp()) + make_interval(secs => p_seconds)
     WHERE l.scope = p_scope AND l.key = p_key AND l.holder = p_holder;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.purge_idempotency_keys_v1(p_batch integer DEFAULT 10000)
 RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_count integer;
BEGIN
    WITH doomed AS (
        -- rows a concurrent begin is looking at are skipped, not waited for
        SELECT k.scope, k.key FROM drainpipe.idempotency_keys k
         WHERE k.expires_at <= v_now
         ORDER BY k.expires_at
         LIMIT greatest(p_batch, 1)
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM drainpipe.idempotency_keys k
     USING doomed d
     WHERE k.scope = d.scope AND k.key = d.key;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    WITH doomed AS (
        -- a lease being taken over right now is skipped
        SELECT l.scope, l.key FROM drainpipe.leases l
         WHERE l.expires_at <= v_now
         ORDER BY l.expires_at
         LIMIT greatest(p_batch, 1)
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM drainpipe.leases l
     USING doomed d
     WHERE l.scope = d.scope AND l.key = d.key;
    RETURN v_count;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.release_idempotent_v1(p_scope text, p_key text, p_holder uuid)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    DELETE FROM drainpipe.idempotency_keys k
     WHERE k.scope = p_scope AND k.key = p_key AND k.holder = p_holder AND k.state = 'running';
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.release_lease_v1(p_key text, p_holder uuid, p_scope text DEFAULT ''::text)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    DELETE FROM drainpipe.leases l
     WHERE l.scope = p_scope AND l.key = p_key AND l.holder = p_holder;
    RETURN FOUND;
END $function$;

RESET check_function_bodies;
