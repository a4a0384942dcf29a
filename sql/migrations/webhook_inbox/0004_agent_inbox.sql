-- webhook-inbox 0004: the agent inbox (docs/reference.md section 11). Inboxes subscribe to webhook
-- sources; every stored webhook message that a subscription matches becomes an event of
-- that inbox, written by a trigger in the transaction that stores the message (so nothing
-- is lost between the store and the fan-out, and release-0/v1 callers of receive fan out
-- too). Agents pull events under leases fenced by (event, delivery, lease token).
--
-- It lives in the webhook-inbox module, not a module of its own: the fan-out trigger sits
-- on drainpipe.webhook_inbox, and installing one module never depends on another.
--
-- Event states: pending → leased → acked, or back to pending (release; an expired lease
-- stays 'leased' with due_at = lease_until in the past until the next hand-out), or
-- failed (the delivery max_attempts ended unacked) / expired (waited past hold_seconds);
-- delivered: handed out in pickup mode (settled at hand-out).

ALTER TABLE drainpipe.webhook_inbox ADD COLUMN IF NOT EXISTS app text;
-- the signature (or the inbox's verify) checked out; store() says false unless told
ALTER TABLE drainpipe.webhook_inbox ADD COLUMN IF NOT EXISTS verified boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS drainpipe.agent_inboxes (
    id text PRIMARY KEY DEFAULT 'inb_' || replace(gen_random_uuid()::text, '-', ''),
    name text NOT NULL CONSTRAINT agent_inbox_name_present CHECK (name <> ''),
    lease_seconds integer NOT NULL DEFAULT 300
        CONSTRAINT agent_inbox_lease_seconds CHECK (lease_seconds BETWEEN 30 AND 3600),
    hold_seconds integer NOT NULL DEFAULT 604800
        CONSTRAINT agent_inbox_hold_seconds CHECK (hold_seconds >= 1),
    max_attempts integer CONSTRAINT agent_inbox_max_attempts CHECK (max_attempts >= 1),
    default_order text NOT NULL DEFAULT 'fifo'
        CONSTRAINT agent_inbox_default_order CHECK (default_order IN ('fifo', 'lifo', 'priority')),
    default_ack text NOT NULL DEFAULT 'manual'
        CONSTRAINT agent_inbox_default_ack CHECK (default_ack IN ('manual', 'pickup')),
    allowed_ack text[] NOT NULL DEFAULT ARRAY['manual', 'pickup']
        CONSTRAINT agent_inbox_allowed_ack CHECK (allowed_ack <@ ARRAY['manual', 'pickup'] AND cardinality(allowed_ack) > 0),
    priority_path text[],
    -- [["name", ["path", "to"]], ...]: the envelope's view, in this order (a jsonb object
    -- would reorder its keys, and the byte cap keeps the first ones); NULL = the whole body
    view_paths jsonb,
    view_max_bytes integer NOT NULL DEFAULT 8192
        CONSTRAINT agent_inbox_view_max_bytes CHECK (view_max_bytes BETWEEN 64 AND 1048576),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.agent_inboxes ENABLE ROW LEVEL SECURITY;
-- create() is idempotent by name: a function file creating its inbox at every cold start
-- gets the same id
CREATE UNIQUE INDEX IF NOT EXISTS agent_inboxes_name_idx ON drainpipe.agent_inboxes (name);

CREATE TABLE IF NOT EXISTS drainpipe.agent_subscriptions (
    id text PRIMARY KEY DEFAULT 'sub_' || replace(gen_random_uuid()::text, '-', ''),
    inbox_id text NOT NULL REFERENCES drainpipe.agent_inboxes (id) ON DELETE CASCADE,
    source text NOT NULL CONSTRAINT agent_subscription_source_present CHECK (source <> ''),
    types text[],
    -- {"data.object.status": "paid"}: every path equal to its value
    where_filter jsonb,
    correlation_path text[],
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE drainpipe.agent_subscriptions ENABLE ROW LEVEL SECURITY;
-- the fan-out reads the subscriptions of one source per stored message
CREATE INDEX IF NOT EXISTS agent_subscriptions_source_idx ON drainpipe.agent_subscriptions (source);
-- subscribing twice with the same filters is the same subscription
CREATE UNIQUE INDEX IF NOT EXISTS agent_subscriptions_spec_idx ON drainpipe.agent_subscriptions (
    inbox_id, source, (coalesce(types, '{}')), (coalesce(where_filter, '{}')),
    (coalesce(correlation_path, '{}')));

CREATE TABLE IF NOT EXISTS drainpipe.agent_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id text NOT NULL REFERENCES drainpipe.agent_inboxes (id) ON DELETE CASCADE,
    -- drainpipe.webhook_inbox.id (no foreign key: purging processed webhooks must not
    -- wait on, or delete, events an agent still holds; the body is then gone from view)
    message_id bigint NOT NULL,
    subscription_id text NOT NULL,
    source text NOT NULL,
    event_type text,
    correlation text,
    priority double precision NOT NULL DEFAULT 0,
    state text NOT NULL DEFAULT 'pending' CONSTRAINT agent_event_state
        CHECK (state IN ('pending', 'leased', 'acked', 'delivered', 'failed', 'expired')),
    -- hand-outs so far (the fencing attempt of the current lease)
    delivery integer NOT NULL DEFAULT 0,
    -- each event keeps the limits it arrived with
    max_attempts integer,
    hold_until timestamptz NOT NULL,
    -- due from: arrival, the end of a release delay, or the end of the current lease
    due_at timestamptz NOT NULL,
    lease_token uuid,
    lease_until timestamptz,
    ack_mode text,
    -- what last changed the state: 'handout', 'ack', 'release', 'pickup', 'attempts', 'hold'
    last_op text,
    outcome jsonb,
    last_error text,
    received_at timestamptz NOT NULL,
    settled_at timestamptz
);
ALTER TABLE drainpipe.agent_events ENABLE ROW LEVEL SECURITY;
-- fifo/lifo hand-outs read this index forwards/backwards; only events that may still be
-- handed out are in it
CREATE INDEX IF NOT EXISTS agent_events_due_idx
    ON drainpipe.agent_events (inbox_id, due_at, id) WHERE state IN ('pending', 'leased');
CREATE INDEX IF NOT EXISTS agent_events_priority_idx
    ON drainpipe.agent_events (inbox_id, priority DESC, due_at, id) WHERE state IN ('pending', 'leased');
-- peek pages by id
CREATE INDEX IF NOT EXISTS agent_events_inbox_idx ON drainpipe.agent_events (inbox_id, id);

-- Idempotency-Key on next: what one (inbox, principal, key) was handed
CREATE TABLE IF NOT EXISTS drainpipe.agent_pulls (
    inbox_id text NOT NULL REFERENCES drainpipe.agent_inboxes (id) ON DELETE CASCADE,
    principal text NOT NULL,
    key text NOT NULL,
    ack text NOT NULL,
    event_ids bigint[] NOT NULL,
    deliveries integer[] NOT NULL,
    tokens uuid[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (inbox_id, principal, key)
);
ALTER TABLE drainpipe.agent_pulls ENABLE ROW LEVEL SECURITY;

-- At most N open streams per inbox across processes: a slot is leased by its holder and
-- renewed while the socket is open, so a crashed process's slots free themselves.
CREATE TABLE IF NOT EXISTS drainpipe.agent_stream_slots (
    inbox_id text NOT NULL REFERENCES drainpipe.agent_inboxes (id) ON DELETE CASCADE,
    slot integer NOT NULL,
    holder text NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (inbox_id, slot)
);
ALTER TABLE drainpipe.agent_stream_slots ENABLE ROW LEVEL SECURITY;

DO $types$
BEGIN
    IF to_regtype('drainpipe.agent_event_v1') IS NULL THEN
        -- outcome: 'handed' (next/claim), 'replayed' (a repeated Idempotency-Key),
        -- 'consumed' (that key's pull has a settled event: id NULL), 'peek',
        -- 'unavailable' (claim: held by another consumer or finished)
        CREATE TYPE drainpipe.agent_event_v1 AS (
            outcome text, id bigint, inbox_id text, source text, app text, event_type text,
            received_at timestamptz, verified boolean, payload jsonb, state text,
            delivery integer, ack text, lease_token uuid, lease_until timestamptz,
            subscription_id text
        );
    END IF;
    IF to_regtype('drainpipe.agent_settlement_v1') IS NULL THEN
        CREATE TYPE drainpipe.agent_settlement_v1 AS (
            ok boolean, inbox_id text, state text, lease_until timestamptz
        );
    END IF;
    IF to_regtype('drainpipe.agent_inbox_v1') IS NULL THEN
        CREATE TYPE drainpipe.agent_inbox_v1 AS (
            id text, name text, lease_seconds integer, hold_seconds integer,
            max_attempts integer, default_order text, default_ack text, allowed_ack text[],
            priority_path text[], view_paths jsonb, view_max_bytes integer
        );
    END IF;
END
$types$;

-- A body path's value as a priority: JSON numbers and numeric strings, clamped to ±1e300;
-- anything else (missing, text, objects) is 0. Never raises: it runs inside the store.
CREATE OR REPLACE FUNCTION drainpipe.agent_priority(p_payload jsonb, p_path text[])
RETURNS double precision
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_path IS NULL THEN 0::double precision
        WHEN jsonb_typeof(p_payload #> p_path) = 'number'
          OR (jsonb_typeof(p_payload #> p_path) = 'string'
              AND (p_payload #>> p_path) ~ '^\s*[-+]?(\d{1,200}(\.\d{0,200})?|\.\d{1,200})([eE][-+]?\d{1,3})?\s*$')
        THEN greatest(-1e300, least(1e300, (p_payload #>> p_path)::numeric))::double precision
        ELSE 0::double precision
    END
$$;

-- Every path of p_where (dotted, array indexes as numbers) equals its value in the body.
CREATE OR REPLACE FUNCTION drainpipe.agent_where_matches(p_payload jsonb, p_where jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_where IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_each(p_where) AS w(key, value)
         WHERE (p_payload #> string_to_array(w.key, '.')) IS DISTINCT FROM w.value)
$$;

-- The fan-out: one event per subscribing inbox (its oldest matching subscription), and a
-- wake-up for long polls of those inboxes (delivered when the store commits).
CREATE OR REPLACE FUNCTION drainpipe.agent_fan_out()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_inbox text;
BEGIN
    FOR v_inbox IN
        INSERT INTO drainpipe.agent_events AS e
               (inbox_id, message_id, subscription_id, source, event_type, correlation,
                priority, max_attempts, hold_until, due_at, received_at)
        SELECT DISTINCT ON (s.inbox_id)
               s.inbox_id, NEW.id, s.id, NEW.source, NEW.event_type,
               CASE WHEN s.correlation_path IS NOT NULL THEN left(NEW.payload #>> s.correlation_path, 1000) END,
               drainpipe.agent_priority(NEW.payload, i.priority_path), i.max_attempts,
               NEW.received_at + make_interval(secs => i.hold_seconds), NEW.received_at,
               NEW.received_at
          FROM drainpipe.agent_subscriptions s
          JOIN drainpipe.agent_inboxes i ON i.id = s.inbox_id
         WHERE s.source = NEW.source
           AND (s.types IS NULL OR NEW.event_type = ANY (s.types))
           AND drainpipe.agent_where_matches(NEW.payload, s.where_filter)
         ORDER BY s.inbox_id, s.created_at, s.id
        RETURNING e.inbox_id
    LOOP
        PERFORM pg_notify('drainpipe_agent_inbox', v_inbox);
    END LOOP;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS agent_fan_out ON drainpipe.webhook_inbox;
CREATE TRIGGER agent_fan_out AFTER INSERT ON drainpipe.webhook_inbox
    FOR EACH ROW EXECUTE FUNCTION drainpipe.agent_fan_out();

-- receive_webhook_v1 plus the envelope's app and whether the signature checked out.
CREATE OR REPLACE FUNCTION drainpipe.receive_webhook_v2(
    p_source text,
    p_message_id text,
    p_event_type text,
    p_payload jsonb,
    p_headers jsonb DEFAULT '{}',
    p_tenant text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_app text DEFAULT NULL,
    p_verified boolean DEFAULT false
)
RETURNS SETOF drainpipe.webhook_receipt_v1
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
    FOR i IN 1..3 LOOP
        INSERT INTO drainpipe.webhook_inbox AS w
               (source, message_id, event_type, payload, headers, tenant, max_attempts, app, verified)
        VALUES (p_source, p_message_id, p_event_type, coalesce(p_payload, 'null'::jsonb),
                coalesce(p_headers, '{}'::jsonb), v_tenant, greatest(coalesce(p_max_attempts, 8), 1),
                nullif(p_app, ''), coalesce(p_verified, false))
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

-- -- inboxes and subscriptions ----------------------------------------------------------

-- Creates the inbox, or gives an inbox of that name these settings; returns its id.
CREATE OR REPLACE FUNCTION drainpipe.agent_create_inbox_v1(
    p_name text, p_lease_seconds integer, p_hold_seconds integer, p_max_attempts integer,
    p_default_order text, p_default_ack text, p_allowed_ack text[], p_priority_path text[],
    p_view_paths jsonb, p_view_max_bytes integer
)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO drainpipe.agent_inboxes AS i
           (name, lease_seconds, hold_seconds, max_attempts, default_order, default_ack,
            allowed_ack, priority_path, view_paths, view_max_bytes)
    VALUES (p_name, p_lease_seconds, p_hold_seconds, p_max_attempts, p_default_order,
            p_default_ack, p_allowed_ack, p_priority_path, p_view_paths, p_view_max_bytes)
    ON CONFLICT (name) DO UPDATE
       SET lease_seconds = excluded.lease_seconds, hold_seconds = excluded.hold_seconds,
           max_attempts = excluded.max_attempts, default_order = excluded.default_order,
           default_ack = excluded.default_ack, allowed_ack = excluded.allowed_ack,
           priority_path = excluded.priority_path, view_paths = excluded.view_paths,
           view_max_bytes = excluded.view_max_bytes
    RETURNING i.id
$$;

CREATE OR REPLACE FUNCTION drainpipe.agent_inbox_v1(p_id text)
RETURNS SETOF drainpipe.agent_inbox_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.id, i.name, i.lease_seconds, i.hold_seconds, i.max_attempts, i.default_order,
           i.default_ack, i.allowed_ack, i.priority_path, i.view_paths, i.view_max_bytes
      FROM drainpipe.agent_inboxes i WHERE i.id = p_id
$$;

-- The subscription's id (the same one for the same filters), or NULL for an unknown inbox.
CREATE OR REPLACE FUNCTION drainpipe.agent_subscribe_v1(
    p_inbox text, p_source text, p_types text[], p_where jsonb, p_correlation_path text[]
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM drainpipe.agent_inboxes WHERE id = p_inbox) THEN
        RETURN NULL;
    END IF;
    INSERT INTO drainpipe.agent_subscriptions AS s (inbox_id, source, types, where_filter, correlation_path)
    VALUES (p_inbox, p_source, p_types, p_where, p_correlation_path)
    ON CONFLICT (inbox_id, source, (coalesce(types, '{}')), (coalesce(where_filter, '{}')),
                 (coalesce(correlation_path, '{}'))) DO NOTHING
    RETURNING s.id INTO v_id;
    IF v_id IS NULL THEN
        SELECT s.id INTO v_id FROM drainpipe.agent_subscriptions s
         WHERE s.inbox_id = p_inbox AND s.source = p_source
           AND coalesce(s.types, '{}') = coalesce(p_types, '{}')
           AND coalesce(s.where_filter, '{}') = coalesce(p_where, '{}')
           AND coalesce(s.correlation_path, '{}') = coalesce(p_correlation_path, '{}');
    END IF;
    RETURN v_id;
END
$$;

-- -- reading events ---------------------------------------------------------------------

-- The events of p_ids in that order, as envelopes' rows (outcome as given).
CREATE OR REPLACE FUNCTION drainpipe.agent_event_rows(p_ids bigint[], p_outcome text)
RETURNS SETOF drainpipe.agent_event_v1
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p_outcome, e.id, e.inbox_id, e.source, w.app, e.event_type, e.received_at,
           coalesce(w.verified, false), w.payload, e.state, e.delivery, e.ack_mode,
           e.lease_token, e.lease_until, e.subscription_id
      FROM unnest(p_ids) WITH ORDINALITY AS f(id, n)
      JOIN drainpipe.agent_events e ON e.id = f.id
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     ORDER BY f.n
$$;

-- An event whose current lease (or wait) is over and that may not be handed out again.
CREATE OR REPLACE FUNCTION drainpipe.agent_event_ends(
    p_hold_until timestamptz, p_delivery integer, p_max_attempts integer, p_now timestamptz
)
RETURNS text
-- no SET clause: a function with one is never inlined, and this one is evaluated up to nine
-- times per row of a hand-out (as a call of its own it was half a hand-out's time); the
-- operators are schema-qualified instead, so no search_path can change what it compares
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_hold_until OPERATOR(pg_catalog.<=) p_now THEN 'expired'
        WHEN p_max_attempts IS NOT NULL AND p_delivery OPERATOR(pg_catalog.>=) p_max_attempts
        THEN 'failed'
    END
$$;

-- Marks the events of p_ids that are due but may not be handed out again failed/expired;
-- returns the ids still to hand out, in the order given.
CREATE OR REPLACE FUNCTION drainpipe.agent_end_spent(p_ids bigint[], p_now timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ended bigint[];
BEGIN
    WITH ended AS (
        UPDATE drainpipe.agent_events e
           SET state = drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now),
               last_op = CASE drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now)
                             WHEN 'expired' THEN 'hold' ELSE 'attempts' END,
               last_error = CASE drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now)
                                WHEN 'expired' THEN 'The event waited past hold_seconds'
                                ELSE coalesce(e.last_error, 'The lease ran out on the last delivery') END,
               lease_until = NULL, settled_at = p_now
         WHERE e.id = ANY (p_ids)
           AND drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NOT NULL
        RETURNING e.id
    )
    SELECT array_agg(id) INTO v_ended FROM ended;
    IF v_ended IS NULL THEN
        RETURN p_ids;
    END IF;
    RETURN ARRAY(SELECT f.id FROM unnest(p_ids) WITH ORDINALITY AS f(id, n)
                  WHERE f.id <> ALL (v_ended) ORDER BY f.n);
END
$$;

-- Hands out the locked, due events of p_ids in one statement: a new delivery and a lease
-- minted here (manual) or settled at once (pickup); an event that may not be handed out
-- again (hold or attempts spent) is marked expired/failed instead. Returns the rows of
-- the events handed out, in the order of p_ids.
CREATE OR REPLACE FUNCTION drainpipe.agent_hand_out(
    p_ids bigint[], p_ack text, p_lease_seconds integer, p_now timestamptz
)
RETURNS SETOF drainpipe.agent_event_v1
-- plpgsql, not sql: its plan is cached per session (a sql function's UPDATE is planned again
-- at every call, which was most of a hand-out's time)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT f.id, f.n FROM unnest(p_ids) WITH ORDINALITY AS f(id, n)
    ), changed AS (
        UPDATE drainpipe.agent_events e
           SET state = CASE
                   WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NOT NULL
                   THEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now)
                   WHEN p_ack = 'pickup' THEN 'delivered' ELSE 'leased' END,
               last_op = CASE drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now)
                   WHEN 'expired' THEN 'hold' WHEN 'failed' THEN 'attempts'
                   ELSE CASE p_ack WHEN 'pickup' THEN 'pickup' ELSE 'handout' END END,
               last_error = CASE drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now)
                   WHEN 'expired' THEN 'The event waited past hold_seconds'
                   WHEN 'failed' THEN coalesce(e.last_error, 'The lease ran out on the last delivery')
                   ELSE e.last_error END,
               delivery = CASE WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NULL
                   THEN e.delivery + 1 ELSE e.delivery END,
               ack_mode = CASE WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NULL
                   THEN p_ack ELSE e.ack_mode END,
               lease_token = CASE
                   WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NOT NULL THEN e.lease_token
                   WHEN p_ack = 'manual' THEN gen_random_uuid() END,
               lease_until = CASE
                   WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NULL AND p_ack = 'manual'
                   THEN p_now + make_interval(secs => p_lease_seconds) END,
               due_at = CASE
                   WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NULL AND p_ack = 'manual'
                   THEN p_now + make_interval(secs => p_lease_seconds) ELSE e.due_at END,
               settled_at = CASE
                   WHEN drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, p_now) IS NOT NULL
                     OR p_ack = 'pickup' THEN p_now END
          FROM picked
         WHERE e.id = picked.id
        RETURNING e.*, picked.n
    )
    SELECT 'handed'::text, c.id, c.inbox_id, c.source, w.app, c.event_type, c.received_at,
           coalesce(w.verified, false), w.payload, c.state, c.delivery, c.ack_mode,
           c.lease_token, c.lease_until, c.subscription_id
      FROM changed c
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = c.message_id
     WHERE c.last_op IN ('handout', 'pickup')
     ORDER BY c.n;
END
$$;

-- next: up to p_max due events of the inbox in p_order, filtered, handed out in one short
-- transaction. With p_key, the same (inbox, principal, key) gets the same events and
-- leases again while none of them is settled, else one 'consumed' row.
CREATE OR REPLACE FUNCTION drainpipe.agent_next_v1(
    p_inbox text,
    p_order text,
    p_max integer,
    p_ack text,
    p_type text DEFAULT NULL,
    p_source text DEFAULT NULL,
    p_subscription text DEFAULT NULL,
    p_correlation text DEFAULT NULL,
    p_principal text DEFAULT NULL,
    p_key text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_event_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_lease integer;
    v_ids bigint[];
    v_rows drainpipe.agent_event_v1[];
    v_pull drainpipe.agent_pulls;
BEGIN
    IF p_order NOT IN ('fifo', 'lifo', 'priority') OR p_ack NOT IN ('manual', 'pickup')
       OR p_max NOT BETWEEN 1 AND 10 THEN
        RAISE EXCEPTION 'order must be fifo, lifo or priority, ack manual or pickup, max 1..10'
            USING ERRCODE = '22023';
    END IF;
    SELECT i.lease_seconds INTO v_lease FROM drainpipe.agent_inboxes i
     WHERE i.id = p_inbox AND p_ack = ANY (i.allowed_ack);
    IF v_lease IS NULL THEN
        RETURN;  -- the caller checked the inbox and its allowed_ack first
    END IF;
    IF p_key IS NOT NULL THEN
        -- concurrent repeats of one key wait for each other instead of both pulling
        PERFORM pg_advisory_xact_lock(hashtextextended(
            'drainpipe.agent_pull:' || p_inbox || ':' || coalesce(p_principal, '') || ':' || p_key, 0));
        SELECT * INTO v_pull FROM drainpipe.agent_pulls p
         WHERE p.inbox_id = p_inbox AND p.principal = coalesce(p_principal, '') AND p.key = p_key;
        IF FOUND THEN
            IF v_pull.ack = 'manual' AND EXISTS (
                SELECT 1 FROM unnest(v_pull.event_ids, v_pull.deliveries, v_pull.tokens) AS f(id, delivery, token)
                  LEFT JOIN drainpipe.agent_events e ON e.id = f.id
                 WHERE e.id IS NULL OR e.state <> 'leased' OR e.delivery <> f.delivery
                    OR e.lease_token IS DISTINCT FROM f.token) THEN
                RETURN QUERY SELECT 'consumed'::text, NULL::bigint, p_inbox, NULL::text, NULL::text,
                    NULL::text, NULL::timestamptz, NULL::boolean, NULL::jsonb, NULL::text,
                    NULL::integer, NULL::text, NULL::uuid, NULL::timestamptz, NULL::text;
                RETURN;
            END IF;
            RETURN QUERY SELECT * FROM drainpipe.agent_event_rows(v_pull.event_ids, 'replayed');
            RETURN;
        END IF;
    END IF;

    IF p_order = 'fifo' THEN
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source
                    OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
               AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
    ELSIF p_order = 'lifo' THEN
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source
                    OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
               AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at DESC, x.id DESC
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
    ELSE
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source
                    OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
               AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.priority DESC, x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
    END IF;
    IF p_key IS NULL THEN
        RETURN QUERY SELECT * FROM drainpipe.agent_hand_out(v_ids, p_ack, v_lease, v_now);
        RETURN;
    END IF;
    v_rows := ARRAY(SELECT h FROM drainpipe.agent_hand_out(v_ids, p_ack, v_lease, v_now) AS h);

    IF cardinality(v_rows) > 0 THEN
        -- an empty answer is not kept: a repeat of it pulls afresh
        DELETE FROM drainpipe.agent_pulls p
         WHERE p.inbox_id = p_inbox AND p.created_at < v_now - interval '1 day';
        INSERT INTO drainpipe.agent_pulls (inbox_id, principal, key, ack, event_ids, deliveries, tokens, created_at)
        SELECT p_inbox, coalesce(p_principal, ''), p_key, p_ack,
               array_agg(r.id ORDER BY r.n), array_agg(r.delivery ORDER BY r.n),
               array_agg(coalesce(r.lease_token, '00000000-0000-0000-0000-000000000000'::uuid) ORDER BY r.n),
               v_now
          FROM unnest(v_rows) WITH ORDINALITY AS r(
               outcome, id, inbox_id, source, app, event_type, received_at, verified, payload,
               state, delivery, ack, lease_token, lease_until, subscription_id, n);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_rows);
END
$$;

-- claim: lease the given events of the inbox that are free now (manual ack); the others
-- come back as 'unavailable' rows (id only); ids not in the inbox come back not at all.
CREATE OR REPLACE FUNCTION drainpipe.agent_claim_v1(
    p_inbox text, p_ids bigint[], p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_event_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_lease integer;
    v_free bigint[];
    v_rows drainpipe.agent_event_v1[];
BEGIN
    SELECT i.lease_seconds INTO v_lease FROM drainpipe.agent_inboxes i
     WHERE i.id = p_inbox AND 'manual' = ANY (i.allowed_ack);
    IF v_lease IS NULL THEN
        RETURN;
    END IF;
    v_free := ARRAY(
        SELECT x.id FROM drainpipe.agent_events x
         WHERE x.id = ANY (p_ids) AND x.inbox_id = p_inbox
           AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED);
    v_rows := ARRAY(SELECT h FROM drainpipe.agent_hand_out(v_free, 'manual', v_lease, v_now) AS h);
    RETURN QUERY SELECT * FROM unnest(v_rows);
    RETURN QUERY
    SELECT 'unavailable'::text, x.id, x.inbox_id, NULL::text, NULL::text, NULL::text,
           NULL::timestamptz, NULL::boolean, NULL::jsonb, NULL::text, NULL::integer,
           NULL::text, NULL::uuid, NULL::timestamptz, NULL::text
      FROM drainpipe.agent_events x
     WHERE x.id = ANY (p_ids) AND x.inbox_id = p_inbox
       AND x.id <> ALL (ARRAY(SELECT r.id FROM unnest(v_rows) AS r));
END
$$;

-- peek: open events of the inbox after p_after (by id), never leased, never counted.
CREATE OR REPLACE FUNCTION drainpipe.agent_events_v1(
    p_inbox text,
    p_after bigint,
    p_limit integer,
    p_type text DEFAULT NULL,
    p_source text DEFAULT NULL,
    p_subscription text DEFAULT NULL,
    p_correlation text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_event_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.agent_event_rows(ARRAY(
        SELECT x.id FROM drainpipe.agent_events x
         WHERE x.inbox_id = p_inbox AND x.id > coalesce(p_after, 0)
           AND x.state IN ('pending', 'leased')
           -- spent but not yet marked so by a hand-out: not open any more
           AND (x.due_at > coalesce(p_now, clock_timestamp())
                OR drainpipe.agent_event_ends(x.hold_until, x.delivery, x.max_attempts,
                                              coalesce(p_now, clock_timestamp())) IS NULL)
           AND (p_type IS NULL OR x.event_type = p_type)
           AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
           AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
           AND (p_correlation IS NULL OR x.correlation = p_correlation)
         ORDER BY x.id
         LIMIT least(greatest(coalesce(p_limit, 50), 1), 200)), 'peek')
$$;

-- -- settling ---------------------------------------------------------------------------
-- Each settlement locks the event and checks it is held by exactly this lease: the same
-- event id, delivery and token. p_inboxes (NULL = any) bounds the inboxes the caller may
-- touch: an event outside them is not found (no row). A lease that ran out with nobody
-- taking the event since is still its current lease, unless the event is spent.

-- Locks an event; marks it failed/expired when its lease ran out and it is spent.
CREATE OR REPLACE FUNCTION drainpipe.agent_lock_event(
    p_id bigint, p_inboxes text[], p_now timestamptz
)
RETURNS drainpipe.agent_events
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v drainpipe.agent_events;
BEGIN
    SELECT * INTO v FROM drainpipe.agent_events e
     WHERE e.id = p_id AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
       FOR UPDATE;
    IF FOUND AND v.state IN ('pending', 'leased') AND v.due_at <= p_now
       AND drainpipe.agent_event_ends(v.hold_until, v.delivery, v.max_attempts, p_now) IS NOT NULL THEN
        PERFORM drainpipe.agent_end_spent(ARRAY[p_id], p_now);
        SELECT * INTO v FROM drainpipe.agent_events e WHERE e.id = p_id;
    END IF;
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.agent_ack_v1(
    p_id bigint, p_delivery integer, p_token uuid, p_outcome jsonb DEFAULT NULL,
    p_inboxes text[] DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_settlement_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v drainpipe.agent_events;
    v_inbox text;
BEGIN
    -- the common case in one statement: the lease is current and the event not spent
    UPDATE drainpipe.agent_events e
       SET state = 'acked', last_op = 'ack', outcome = p_outcome, lease_until = NULL,
           settled_at = v_now
     WHERE e.id = p_id AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
       AND e.state = 'leased' AND e.delivery = p_delivery AND e.lease_token = p_token
       AND (e.due_at > v_now
            OR drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, v_now) IS NULL)
    RETURNING e.inbox_id INTO v_inbox;
    IF v_inbox IS NOT NULL THEN
        RETURN QUERY SELECT true, v_inbox, 'acked'::text, NULL::timestamptz;
        RETURN;
    END IF;
    v := drainpipe.agent_lock_event(p_id, p_inboxes, v_now);
    IF v.id IS NULL THEN
        RETURN;
    END IF;
    IF v.delivery <> p_delivery OR v.lease_token IS DISTINCT FROM p_token THEN
        RETURN QUERY SELECT false, v.inbox_id, v.state, v.lease_until;
    ELSIF v.state = 'acked' AND v.last_op = 'ack' THEN
        RETURN QUERY SELECT true, v.inbox_id, v.state, NULL::timestamptz;  -- the same ack again
    ELSIF v.state = 'leased' THEN
        UPDATE drainpipe.agent_events e
           SET state = 'acked', last_op = 'ack', outcome = p_outcome, lease_until = NULL,
               settled_at = v_now
         WHERE e.id = p_id;
        RETURN QUERY SELECT true, v.inbox_id, 'acked'::text, NULL::timestamptz;
    ELSE
        RETURN QUERY SELECT false, v.inbox_id, v.state, v.lease_until;
    END IF;
END
$$;

-- Several acks in one call, each fenced exactly as agent_ack_v1 (the acks an agent awaits
-- together, agents/batch.py): the events are locked in id order (two batches never
-- deadlock), the current leases are acked in one UPDATE, and whatever that did not settle
-- (a stale lease, a repeat, a spent event, an id twice) goes through agent_ack_v1 one by
-- one. Rows: the 1-based position in the arrays and its settlement; no row for a position
-- whose event does not exist within p_inboxes.
CREATE OR REPLACE FUNCTION drainpipe.agent_ack_many_v1(
    p_ids bigint[], p_deliveries integer[], p_tokens uuid[], p_outcomes jsonb[],
    p_inboxes text[] DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (n_at bigint, ok boolean, inbox text, state_now text, lease_ends timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    -- a parameter, not the literal: "state = 'leased'" lets the planner prove the partial
    -- due index applies and AND it with the id lookup, reading every open event's entry
    -- (0.5 ms a call at 10000 open events); compared with a parameter, the generic plan
    -- looks the ids up in the primary key only
    v_leased text := 'leased';
    v_done bigint[];
    v_inboxes text[];
BEGIN
    PERFORM 1 FROM drainpipe.agent_events e
     WHERE e.id = ANY (p_ids) AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
     ORDER BY e.id
       FOR UPDATE;
    -- by id = ANY and array_position, not a join with unnest(...): the cached generic plan
    -- of a join guessed a hash join over a scan of the whole table (2 ms a call); an id
    -- listed twice is checked at its first position here, the other one falls through
    WITH acked AS (
        UPDATE drainpipe.agent_events e
           SET state = 'acked', last_op = 'ack',
               outcome = p_outcomes[array_position(p_ids, e.id)], lease_until = NULL,
               settled_at = v_now
         WHERE e.id = ANY (p_ids) AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
           AND e.state = v_leased
           AND e.delivery = p_deliveries[array_position(p_ids, e.id)]
           AND e.lease_token = p_tokens[array_position(p_ids, e.id)]
           AND (e.due_at > v_now
                OR drainpipe.agent_event_ends(e.hold_until, e.delivery, e.max_attempts, v_now) IS NULL)
        RETURNING array_position(p_ids, e.id)::bigint AS n, e.inbox_id
    )
    SELECT array_agg(a.n), array_agg(a.inbox_id) INTO v_done, v_inboxes FROM acked a;
    RETURN QUERY SELECT d.n, true, d.inbox_id, 'acked'::text, NULL::timestamptz
                   FROM unnest(v_done, v_inboxes) AS d(n, inbox_id);
    RETURN QUERY
    SELECT f.n, r.ok, r.inbox_id, r.state, r.lease_until
      FROM unnest(p_ids, p_deliveries, p_tokens, p_outcomes) WITH ORDINALITY
           AS f(id, delivery, token, outcome, n)
     CROSS JOIN LATERAL drainpipe.agent_ack_v1(f.id, f.delivery, f.token, f.outcome, p_inboxes, v_now) AS r
     WHERE f.n <> ALL (coalesce(v_done, '{}'))
     ORDER BY f.n;
END
$$;

-- Gives the event back: due again after p_delay seconds, or failed when this was its last
-- delivery (max_attempts).
CREATE OR REPLACE FUNCTION drainpipe.agent_release_v1(
    p_id bigint, p_delivery integer, p_token uuid, p_delay double precision DEFAULT 0,
    p_error text DEFAULT NULL, p_inboxes text[] DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_settlement_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v drainpipe.agent_events := drainpipe.agent_lock_event(p_id, p_inboxes, v_now);
    v_state text;
BEGIN
    IF v.id IS NULL THEN
        RETURN;
    END IF;
    IF v.delivery <> p_delivery OR v.lease_token IS DISTINCT FROM p_token THEN
        RETURN QUERY SELECT false, v.inbox_id, v.state, v.lease_until;
    ELSIF v.state IN ('pending', 'failed') AND v.last_op = 'release' THEN
        RETURN QUERY SELECT true, v.inbox_id, v.state, NULL::timestamptz;  -- the same release again
    ELSIF v.state = 'leased' THEN
        v_state := CASE WHEN v.max_attempts IS NOT NULL AND v.delivery >= v.max_attempts
                        THEN 'failed' ELSE 'pending' END;
        UPDATE drainpipe.agent_events e
           SET state = v_state, last_op = 'release', lease_until = NULL,
               last_error = left(p_error, 4000),
               due_at = v_now + make_interval(secs => greatest(coalesce(p_delay, 0), 0)),
               settled_at = CASE v_state WHEN 'failed' THEN v_now END
         WHERE e.id = p_id;
        IF v_state = 'pending' AND coalesce(p_delay, 0) <= 0 THEN
            PERFORM pg_notify('drainpipe_agent_inbox', v.inbox_id);
        END IF;
        RETURN QUERY SELECT true, v.inbox_id, v_state, NULL::timestamptz;
    ELSE
        RETURN QUERY SELECT false, v.inbox_id, v.state, v.lease_until;
    END IF;
END
$$;

-- The lease then ends p_seconds from now.
CREATE OR REPLACE FUNCTION drainpipe.agent_extend_v1(
    p_id bigint, p_delivery integer, p_token uuid, p_seconds double precision,
    p_inboxes text[] DEFAULT NULL, p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.agent_settlement_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v drainpipe.agent_events := drainpipe.agent_lock_event(p_id, p_inboxes, v_now);
    v_until timestamptz := v_now + make_interval(secs => greatest(p_seconds, 0));
BEGIN
    IF v.id IS NULL THEN
        RETURN;
    END IF;
    IF v.state = 'leased' AND v.delivery = p_delivery AND v.lease_token = p_token THEN
        UPDATE drainpipe.agent_events e SET lease_until = v_until, due_at = v_until WHERE e.id = p_id;
        RETURN QUERY SELECT true, v.inbox_id, 'leased'::text, v_until;
    ELSE
        RETURN QUERY SELECT false, v.inbox_id, v.state, v.lease_until;
    END IF;
END
$$;

-- The stored body of an event (NULL once the webhook message was purged); no row for an
-- event outside p_inboxes.
CREATE OR REPLACE FUNCTION drainpipe.agent_raw_v1(p_id bigint, p_inboxes text[] DEFAULT NULL)
RETURNS TABLE (inbox_id text, body text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.inbox_id, w.payload::text
      FROM drainpipe.agent_events e
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     WHERE e.id = p_id AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
$$;

-- -- stream slots ----------------------------------------------------------------------

-- A free slot (1..p_limit) of the inbox for p_holder until p_seconds from now, or NULL.
CREATE OR REPLACE FUNCTION drainpipe.agent_stream_acquire_v1(
    p_inbox text, p_holder text, p_seconds double precision, p_limit integer DEFAULT 10,
    p_now timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_slot integer;
BEGIN
    -- two processes looking for a free slot at once must not both take the last one
    PERFORM pg_advisory_xact_lock(hashtextextended('drainpipe.agent_stream:' || p_inbox, 0));
    SELECT s INTO v_slot FROM generate_series(1, greatest(p_limit, 0)) AS s
     WHERE NOT EXISTS (SELECT 1 FROM drainpipe.agent_stream_slots x
                        WHERE x.inbox_id = p_inbox AND x.slot = s AND x.until > v_now)
     ORDER BY s LIMIT 1;
    IF v_slot IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO drainpipe.agent_stream_slots (inbox_id, slot, holder, until)
    VALUES (p_inbox, v_slot, p_holder, v_now + make_interval(secs => p_seconds))
    ON CONFLICT (inbox_id, slot) DO UPDATE SET holder = excluded.holder, until = excluded.until;
    RETURN v_slot;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.agent_stream_renew_v1(
    p_inbox text, p_slot integer, p_holder text, p_seconds double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE drainpipe.agent_stream_slots s
       SET until = coalesce(p_now, clock_timestamp()) + make_interval(secs => p_seconds)
     WHERE s.inbox_id = p_inbox AND s.slot = p_slot AND s.holder = p_holder;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.agent_stream_release_v1(p_inbox text, p_slot integer, p_holder text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM drainpipe.agent_stream_slots s
     WHERE s.inbox_id = p_inbox AND s.slot = p_slot AND s.holder = p_holder;
    RETURN FOUND;
END
$$;
