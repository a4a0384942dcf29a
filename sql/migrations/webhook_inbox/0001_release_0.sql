-- webhook-inbox: verified deliveries stored once per (source, tenant, message id), then
-- processed later with retries, leases fenced by the claimed attempt, and checkpoints.
--
-- States: pending → processing → processed, or back to pending (retry backoff), or dead.
-- While a message is processing, available_at = locked_until (the lease end), so one
-- index ordered by available_at serves both "due for a retry" and "lease ran out".

CREATE TABLE IF NOT EXISTS drainpipe.webhook_inbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source text NOT NULL CONSTRAINT webhook_inbox_source_present CHECK (source <> ''),
    message_id text NOT NULL CONSTRAINT webhook_inbox_message_id_present CHECK (message_id <> ''),
    event_type text,
    payload jsonb NOT NULL,
    -- the request headers the inbox was told to keep, names lower-cased
    headers jsonb NOT NULL DEFAULT '{}',
    status text NOT NULL DEFAULT 'pending'
        CONSTRAINT webhook_inbox_status CHECK (status IN ('pending', 'processing', 'processed', 'dead')),
    -- claims so far; 0 = never claimed; the fencing token of complete/fail/checkpoint/extend
    attempts integer NOT NULL DEFAULT 0,
    -- each message keeps the limit it arrived with, so changing max_attempts affects new ones only
    max_attempts integer NOT NULL DEFAULT 8 CONSTRAINT webhook_inbox_max_attempts CHECK (max_attempts >= 1),
    -- claimable from: arrival, the end of a retry backoff or the end of the current lease
    available_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    locked_by text,
    locked_until timestamptz,
    last_error text,
    received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    processed_at timestamptz,
    -- '' would collide with "no tenant" in the uniqueness index below, so it is not a tenant
    tenant text CONSTRAINT webhook_inbox_tenant_present CHECK (tenant <> ''),
    -- what the handler saved with message.checkpoint(); survives failed attempts
    checkpoint jsonb NOT NULL DEFAULT '{}'
);
ALTER TABLE drainpipe.webhook_inbox ENABLE ROW LEVEL SECURITY;

-- One row per delivery: providers retry, and a null tenant counts as one tenant of its own
-- (coalesce instead of NULLS NOT DISTINCT so the module also installs on Postgres 14).
CREATE UNIQUE INDEX IF NOT EXISTS webhook_inbox_message_idx
    ON drainpipe.webhook_inbox (source, (coalesce(tenant, '')), message_id);
-- The claim reads this index in order: only messages that may still run are in it.
CREATE INDEX IF NOT EXISTS webhook_inbox_ready_idx
    ON drainpipe.webhook_inbox (source, available_at, id) WHERE status IN ('pending', 'processing');
-- A tenant's delivery log, newest first (list_webhooks) and per-tenant purges; not partial,
-- so the log of tenantless messages (tenant IS NULL) reads it too.
CREATE INDEX IF NOT EXISTS webhook_inbox_tenant_idx
    ON drainpipe.webhook_inbox (tenant, source, received_at, id);
-- purge_webhooks walks processed messages by age; pending work is not in it.
CREATE INDEX IF NOT EXISTS webhook_inbox_processed_idx
    ON drainpipe.webhook_inbox (source, processed_at) WHERE status = 'processed';

-- Store a delivery unless (source, tenant, message id) is already there; returns the row id
-- and whether it was a duplicate. Safe under any number of concurrent identical deliveries.
CREATE OR REPLACE FUNCTION drainpipe.receive_webhook(
    p_source text,
    p_message_id text,
    p_event_type text,
    p_payload jsonb,
    p_headers jsonb DEFAULT '{}',
    p_tenant text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL
)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := nullif(p_tenant, '');
    v_id bigint;
BEGIN
    IF coalesce(p_source, '') = '' OR coalesce(p_message_id, '') = '' THEN
        RAISE EXCEPTION 'A webhook needs a source and a message id' USING ERRCODE = '22023';
    END IF;
    -- A concurrent insert of the same delivery makes ON CONFLICT wait for it and then do
    -- nothing; the SELECT (a new snapshot) then sees the committed row. The loop covers a
    -- row purged between the two statements.
    FOR i IN 1..3 LOOP
        INSERT INTO drainpipe.webhook_inbox AS w
               (source, message_id, event_type, payload, headers, tenant, max_attempts)
        VALUES (p_source, p_message_id, p_event_type, coalesce(p_payload, 'null'::jsonb),
                coalesce(p_headers, '{}'::jsonb), v_tenant, greatest(coalesce(p_max_attempts, 8), 1))
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
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.claim_webhooks(
    p_source text,
    p_worker text,
    p_batch integer DEFAULT 10,
    p_lease double precision DEFAULT 300
)
RETURNS SETOF drainpipe.webhook_inbox
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    -- A message whose lease ran out on its last attempt is dead, not work to run again.
    UPDATE drainpipe.webhook_inbox w
       SET status = 'dead', last_error = 'The lease ran out on the last attempt',
           locked_by = NULL, locked_until = NULL
     WHERE w.id IN (
           SELECT x.id FROM drainpipe.webhook_inbox x
            WHERE x.source = p_source AND x.status = 'processing'
              AND x.available_at <= v_now AND x.attempts >= x.max_attempts
              FOR UPDATE SKIP LOCKED);

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
    RETURNING w.*;
END
$$;

-- Fenced by worker and attempt: a worker whose message was claimed again changes nothing.
-- (A lease that ran out with nobody claiming since still lets its worker finish.)
CREATE OR REPLACE FUNCTION drainpipe.complete_webhook(p_id bigint, p_worker text, p_attempt integer)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH done AS (
        UPDATE drainpipe.webhook_inbox w
           SET status = 'processed', processed_at = clock_timestamp(), last_error = NULL,
               locked_by = NULL, locked_until = NULL
         WHERE w.id = p_id AND w.status = 'processing'
           AND w.locked_by = p_worker AND w.attempts = p_attempt
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM done)
$$;

-- Returns the new status ('pending' or 'dead'), or NULL when the worker no longer holds it.
-- Backoff without retry_in: min(3600, 2^attempts) seconds, no jitter (2 s, 4 s, 8 s, ...).
CREATE OR REPLACE FUNCTION drainpipe.fail_webhook(
    p_id bigint,
    p_worker text,
    p_attempt integer,
    p_error text,
    p_retry_in double precision DEFAULT NULL
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH failed AS (
        UPDATE drainpipe.webhook_inbox w
           SET status = CASE WHEN w.attempts >= w.max_attempts THEN 'dead' ELSE 'pending' END,
               last_error = left(coalesce(p_error, 'null'), 4000),
               available_at = clock_timestamp() + make_interval(secs => greatest(
                   coalesce(p_retry_in, least(3600, power(2, least(w.attempts, 12)))), 0)),
               locked_by = NULL, locked_until = NULL
         WHERE w.id = p_id AND w.status = 'processing'
           AND w.locked_by = p_worker AND w.attempts = p_attempt
        RETURNING w.status
    )
    SELECT status FROM failed
$$;

-- Shallow-merges fields into the stored checkpoint while the worker holds the message.
CREATE OR REPLACE FUNCTION drainpipe.checkpoint_webhook(
    p_id bigint, p_worker text, p_attempt integer, p_fields jsonb
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- The heartbeat: renews the leases of every message of a batch still held, in one round
-- trip; returns the ids it renewed (a missing id was taken over or finished).
CREATE OR REPLACE FUNCTION drainpipe.extend_webhooks(
    p_ids bigint[], p_attempts integer[], p_worker text, p_lease double precision
)
RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE drainpipe.webhook_inbox w
       SET locked_until = clock_timestamp() + make_interval(secs => greatest(p_lease, 0)),
           available_at = clock_timestamp() + make_interval(secs => greatest(p_lease, 0))
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE w.id = f.id AND w.status = 'processing'
       AND w.locked_by = p_worker AND w.attempts = f.attempt
    RETURNING w.id
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_webhook(
    p_id bigint, p_worker text, p_attempt integer, p_lease double precision DEFAULT 300
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT EXISTS (SELECT 1 FROM drainpipe.extend_webhooks(ARRAY[p_id], ARRAY[p_attempt], p_worker, p_lease))
$$;

-- One tenant's messages, newest first; a null p_tenant lists the messages stored without a
-- tenant (never every tenant's: a missing tenant must not widen the log).
CREATE OR REPLACE FUNCTION drainpipe.list_webhooks(
    p_tenant text,
    p_source text DEFAULT NULL,
    p_status text DEFAULT NULL,
    p_max_rows integer DEFAULT 100
)
RETURNS SETOF drainpipe.webhook_inbox
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'processing', 'processed', 'dead') THEN
        RAISE EXCEPTION 'Unknown webhook status "%"', p_status USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT w.* FROM drainpipe.webhook_inbox w
     WHERE ((p_tenant IS NOT NULL AND w.tenant = p_tenant) OR (p_tenant IS NULL AND w.tenant IS NULL))
       AND (p_source IS NULL OR w.source = p_source)
       AND (p_status IS NULL OR w.status = p_status)
     ORDER BY w.received_at DESC, w.id DESC
     LIMIT least(greatest(coalesce(p_max_rows, 100), 1), 1000);
END
$$;

-- Deletes up to p_batch finished messages: processed ones whose processing is older than
-- p_older_than seconds and, with p_include_dead, dead ones received that long ago.
-- Pending and processing messages are never touched, whatever the age or tenant.
CREATE OR REPLACE FUNCTION drainpipe.purge_webhooks(
    p_older_than double precision DEFAULT 2592000,
    p_include_dead boolean DEFAULT false,
    p_batch integer DEFAULT 10000,
    p_tenant text DEFAULT NULL,
    p_source text DEFAULT NULL
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
    SELECT count(*)::integer FROM gone
$$;
