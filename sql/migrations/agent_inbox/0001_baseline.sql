-- drainpipe's agent-inbox module: inboxes fed by webhook sources, pulled by agents (needs webhook-inbox: its fan-out trigger sits on drainpipe.webhook_inbox).
-- Baseline: the schema as it stood when tests/sql/squash.py squashed the migrations.
-- Change it with a new migration, never here (sql/README.md).

SET check_function_bodies = off;

-- Row types
DO $types$
BEGIN
    IF to_regtype('drainpipe.agent_event_v1') IS NULL THEN
        CREATE TYPE drainpipe.agent_event_v1 AS (outcome text, id bigint, inbox_id text, source text, app text, event_type text, received_at timestamp with time zone, verified boolean, payload jsonb, state text, delivery integer, ack text, lease_token uuid, lease_until timestamp with time zone, subscription_id text);
    END IF;
    IF to_regtype('drainpipe.agent_inbox_v1') IS NULL THEN
        CREATE TYPE drainpipe.agent_inbox_v1 AS (id text, name text, lease_seconds integer, hold_seconds integer, max_attempts integer, default_order text, default_ack text, allowed_ack text[], priority_path text[], view_paths jsonb, view_max_bytes integer);
    END IF;
    IF to_regtype('drainpipe.agent_settlement_v1') IS NULL THEN
        CREATE TYPE drainpipe.agent_settlement_v1 AS (ok boolean, inbox_id text, state text, lease_until timestamp with time zone);
    END IF;
END
$types$;

-- Tables
CREATE TABLE IF NOT EXISTS drainpipe.agent_inboxes (
    id text DEFAULT ('inb_'::text || replace((gen_random_uuid())::text, '-'::text, ''::text)) NOT NULL,
    name text NOT NULL,
    lease_seconds integer DEFAULT 300 NOT NULL,
    hold_seconds integer DEFAULT 604800 NOT NULL,
    max_attempts integer,
    default_order text DEFAULT 'fifo'::text NOT NULL,
    default_ack text DEFAULT 'manual'::text NOT NULL,
    allowed_ack text[] DEFAULT ARRAY['manual'::text, 'pickup'::text] NOT NULL,
    priority_path text[],
    view_paths jsonb,
    view_max_bytes integer DEFAULT 8192 NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT agent_inboxes_pkey PRIMARY KEY (id),
    CONSTRAINT agent_inbox_allowed_ack CHECK (((allowed_ack <@ ARRAY['manual'::text, 'pickup'::text]) AND (cardinality(allowed_ack) > 0))),
    CONSTRAINT agent_inbox_default_ack CHECK ((default_ack = ANY (ARRAY['manual'::text, 'pickup'::text]))),
    CONSTRAINT agent_inbox_default_order CHECK ((default_order = ANY (ARRAY['fifo'::text, 'lifo'::text, 'priority'::text]))),
    CONSTRAINT agent_inbox_hold_seconds CHECK ((hold_seconds >= 1)),
    CONSTRAINT agent_inbox_lease_seconds CHECK (((lease_seconds >= 30) AND (lease_seconds <= 3600))),
    CONSTRAINT agent_inbox_max_attempts CHECK ((max_attempts >= 1)),
    CONSTRAINT agent_inbox_name_present CHECK ((name <> ''::text)),
    CONSTRAINT agent_inbox_view_max_bytes CHECK (((view_max_bytes >= 64) AND (view_max_bytes <= 1048576)))
);
CREATE UNIQUE INDEX IF NOT EXISTS agent_inboxes_name_idx ON drainpipe.agent_inboxes USING btree (name);
ALTER TABLE drainpipe.agent_inboxes ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.agent_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    inbox_id text NOT NULL,
    message_id bigint NOT NULL,
    subscription_id text NOT NULL,
    source text NOT NULL,
    event_type text,
    correlation text,
    priority double precision DEFAULT 0 NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    delivery integer DEFAULT 0 NOT NULL,
    max_attempts integer,
    hold_until timestamp with time zone NOT NULL,
    due_at timestamp with time zone NOT NULL,
    lease_token uuid,
    lease_until timestamp with time zone,
    ack_mode text,
    last_op text,
    outcome jsonb,
    last_error text,
    received_at timestamp with time zone NOT NULL,
    settled_at timestamp with time zone,
    CONSTRAINT agent_events_pkey PRIMARY KEY (id),
    CONSTRAINT agent_event_state CHECK ((state = ANY (ARRAY['pending'::text, 'leased'::text, 'acked'::text, 'delivered'::text, 'failed'::text, 'expired'::text]))),
    CONSTRAINT agent_events_inbox_id_fkey FOREIGN KEY (inbox_id) REFERENCES drainpipe.agent_inboxes(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS agent_events_due_idx ON drainpipe.agent_events USING btree (hashtext(inbox_id), due_at, id) WHERE (state = ANY (ARRAY['pending'::text, 'leased'::text]));
CREATE INDEX IF NOT EXISTS agent_events_open_idx ON drainpipe.agent_events USING btree (hashtext(inbox_id), id) WHERE (state = ANY (ARRAY['pending'::text, 'leased'::text]));
CREATE INDEX IF NOT EXISTS agent_events_ranked_idx ON drainpipe.agent_events USING btree (hashtext(inbox_id), priority DESC, due_at, id) WHERE ((state = ANY (ARRAY['pending'::text, 'leased'::text])) AND (priority <> (0)::double precision));
ALTER TABLE drainpipe.agent_events SET (vacuum_index_cleanup=on, autovacuum_vacuum_scale_factor=0, autovacuum_vacuum_threshold=5000);
ALTER TABLE drainpipe.agent_events ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.agent_pulls (
    inbox_id text NOT NULL,
    principal text NOT NULL,
    key text NOT NULL,
    ack text NOT NULL,
    event_ids bigint[] NOT NULL,
    deliveries integer[] NOT NULL,
    tokens uuid[] NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT agent_pulls_pkey PRIMARY KEY (inbox_id, principal, key),
    CONSTRAINT agent_pulls_inbox_id_fkey FOREIGN KEY (inbox_id) REFERENCES drainpipe.agent_inboxes(id) ON DELETE CASCADE
);
ALTER TABLE drainpipe.agent_pulls ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.agent_stream_slots (
    inbox_id text NOT NULL,
    slot integer NOT NULL,
    holder text NOT NULL,
    until timestamp with time zone NOT NULL,
    CONSTRAINT agent_stream_slots_pkey PRIMARY KEY (inbox_id, slot),
    CONSTRAINT agent_stream_slots_inbox_id_fkey FOREIGN KEY (inbox_id) REFERENCES drainpipe.agent_inboxes(id) ON DELETE CASCADE
);
ALTER TABLE drainpipe.agent_stream_slots ENABLE ROW LEVEL SECURITY;

CREATE TABLE IF NOT EXISTS drainpipe.agent_subscriptions (
    id text DEFAULT ('sub_'::text || replace((gen_random_uuid())::text, '-'::text, ''::text)) NOT NULL,
    inbox_id text NOT NULL,
    source text NOT NULL,
    types text[],
    where_filter jsonb,
    correlation_path text[],
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT agent_subscriptions_pkey PRIMARY KEY (id),
    CONSTRAINT agent_subscription_source_present CHECK ((source <> ''::text)),
    CONSTRAINT agent_subscriptions_inbox_id_fkey FOREIGN KEY (inbox_id) REFERENCES drainpipe.agent_inboxes(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS agent_subscriptions_source_idx ON drainpipe.agent_subscriptions USING btree (source);
CREATE UNIQUE INDEX IF NOT EXISTS agent_subscriptions_spec_idx ON drainpipe.agent_subscriptions USING btree (inbox_id, source, COALESCE(types, '{}'::text[]), COALESCE(where_filter, '{}'::jsonb), COALESCE(correlation_path, '{}'::text[]));
ALTER TABLE drainpipe.agent_subscriptions ENABLE ROW LEVEL SECURITY;

-- Functions
CREATE OR REPLACE FUNCTION drainpipe.agent_ack_many_v1(p_ids bigint[], p_deliveries integer[], p_tokens uuid[], p_outcomes jsonb[], p_inboxes text[] DEFAULT NULL::text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(n_at bigint, ok boolean, inbox text, state_now text, lease_ends timestamp with time zone) LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_bitmapscan TO 'off' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    -- a parameter, not the literal: the generic plan reads the primary key only (with
    -- the literal the planner also ANDs in a scan of the whole partial due index)
    v_leased text := 'leased';
    v_done bigint[];
    v_inboxes text[];
    v_event record;
BEGIN
    -- the current leases, acked in one statement. Its scan of the primary key takes the
    -- row locks in id order, and only of the rows it acks, so two batches over the same
    -- events lock them in the same order (bitmap scans, in physical order, are off)
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
    IF cardinality(v_done) = cardinality(p_ids) THEN
        RETURN;  -- every position acked by the statement: nothing left to settle one by one
    END IF;
    -- the rest, in the batch's order. A stale lease (another delivery or token than the
    -- event's) is answered from what the event is now, without a lock: it never becomes
    -- current again, and not waiting here for a row another batch holds is what keeps
    -- this call from deadlocking with one that waits for a row this UPDATE acked. The
    -- rest (a repeat, a spent event, an id twice, a row that changed under the UPDATE)
    -- goes through agent_ack_v1, which locks the event.
    FOR v_event IN
        -- a lateral lookup per position, not a join: the generic plan of a join with
        -- unnest(...) may hash the whole table
        SELECT f.n, f.id, f.delivery, f.token, f.outcome, e.inbox_id, e.state, e.lease_until,
               e.delivery AS current_delivery, e.lease_token AS current_token
          FROM unnest(p_ids, p_deliveries, p_tokens, p_outcomes) WITH ORDINALITY
               AS f(id, delivery, token, outcome, n)
         CROSS JOIN LATERAL (
               SELECT x.inbox_id, x.state, x.lease_until, x.delivery, x.lease_token
                 FROM drainpipe.agent_events x
                WHERE x.id = f.id AND (p_inboxes IS NULL OR x.inbox_id = ANY (p_inboxes))) e
         WHERE f.n <> ALL (coalesce(v_done, '{}'))
         ORDER BY f.n
    LOOP
        IF v_event.current_delivery <> v_event.delivery
           OR v_event.current_token IS DISTINCT FROM v_event.token THEN
            n_at := v_event.n; ok := false; inbox := v_event.inbox_id;
            state_now := v_event.state; lease_ends := v_event.lease_until;
            RETURN NEXT;
        ELSE
            RETURN QUERY SELECT v_event.n, r.ok, r.inbox_id, r.state, r.lease_until
              FROM drainpipe.agent_ack_v1(v_event.id, v_event.delivery, v_event.token,
                                          v_event.outcome, p_inboxes, v_now) AS r;
        END IF;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_ack_next_v1(p_ids bigint[], p_deliveries integer[], p_tokens uuid[], p_outcomes jsonb[], p_ack_inboxes text[], p_ack_now timestamp with time zone, p_inbox text, p_order text, p_max integer, p_ack text, p_type text DEFAULT NULL::text, p_source text DEFAULT NULL::text, p_subscription text DEFAULT NULL::text, p_correlation text DEFAULT NULL::text, p_principal text DEFAULT NULL::text, p_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    RETURN QUERY
    SELECT 'ack'::text, a.n_at, a.inbox, a.inbox, NULL::text, a.state_now, NULL::timestamptz,
           a.ok, NULL::jsonb, a.state_now, NULL::integer, NULL::text, NULL::uuid,
           a.lease_ends, NULL::text
      FROM drainpipe.agent_ack_many_v1(p_ids, p_deliveries, p_tokens, p_outcomes,
                                       p_ack_inboxes, p_ack_now) AS a;
    RETURN QUERY
    SELECT * FROM drainpipe.agent_next_v1(p_inbox, p_order, p_max, p_ack, p_type, p_source,
                                          p_subscription, p_correlation, p_principal, p_key,
                                          p_now);
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_ack_v1(p_id bigint, p_delivery integer, p_token uuid, p_outcome jsonb DEFAULT NULL::jsonb, p_inboxes text[] DEFAULT NULL::text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_settlement_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_claim_v1(p_inbox text, p_ids bigint[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_create_inbox_v1(p_name text, p_lease_seconds integer, p_hold_seconds integer, p_max_attempts integer, p_default_order text, p_default_ack text, p_allowed_ack text[], p_priority_path text[], p_view_paths jsonb, p_view_max_bytes integer)
 RETURNS text LANGUAGE sql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
    RETURNING i.id $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_end_spent(p_ids bigint[], p_now timestamp with time zone)
 RETURNS bigint[] LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_event_ends(p_hold_until timestamp with time zone, p_delivery integer, p_max_attempts integer, p_now timestamp with time zone)
 RETURNS text LANGUAGE sql IMMUTABLE AS $function$
    SELECT CASE
        WHEN p_hold_until OPERATOR(pg_catalog.<=) p_now THEN 'expired'
        WHEN p_max_attempts IS NOT NULL AND p_delivery OPERATOR(pg_catalog.>=) p_max_attempts
        THEN 'failed'
    END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_event_rows(p_ids bigint[], p_outcome text)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE sql STABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT p_outcome, e.id, e.inbox_id, e.source, w.app, e.event_type, e.received_at,
           coalesce(w.verified, false), w.payload, e.state, e.delivery, e.ack_mode,
           e.lease_token, e.lease_until, e.subscription_id
      FROM unnest(p_ids) WITH ORDINALITY AS f(id, n)
      JOIN drainpipe.agent_events e ON e.id = f.id
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     ORDER BY f.n $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_events_v1(p_inbox text, p_after bigint, p_limit integer, p_type text DEFAULT NULL::text, p_source text DEFAULT NULL::text, p_subscription text DEFAULT NULL::text, p_correlation text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET enable_bitmapscan TO 'off' AS $function$
    SELECT * FROM drainpipe.agent_event_rows(ARRAY(
        SELECT x.id FROM drainpipe.agent_events x
         WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.id > coalesce(p_after, 0)
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
         LIMIT least(greatest(coalesce(p_limit, 50), 1), 200)), 'peek') $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_extend_v1(p_id bigint, p_delivery integer, p_token uuid, p_seconds double precision, p_inboxes text[] DEFAULT NULL::text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_settlement_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_fan_out()
 RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_hand_out(p_ids bigint[], p_ack text, p_lease_seconds integer, p_now timestamp with time zone)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_inbox_overview_v1(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(inbox_id text, name text, counts jsonb, open_streams integer, oldest_open_age_s double precision) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    WITH clock AS (
        SELECT coalesce(p_now, clock_timestamp()) AS now
    ), per_state AS (
        SELECT e.inbox_id, e.state, count(*) AS n,
               min(e.received_at) FILTER (WHERE e.state IN ('pending', 'leased')) AS oldest
          FROM drainpipe.agent_events e
         GROUP BY e.inbox_id, e.state
    ), per_inbox AS (
        SELECT p.inbox_id, jsonb_object_agg(p.state, p.n) AS counts, min(p.oldest) AS oldest
          FROM per_state p
         GROUP BY p.inbox_id
    ), streams AS (
        -- a slot counts while its lease runs: a crashed process's slot stops counting
        -- when it would free itself
        SELECT s.inbox_id, count(*) AS n
          FROM drainpipe.agent_stream_slots s, clock
         WHERE s.until > clock.now
         GROUP BY s.inbox_id
    )
    SELECT i.id, i.name, coalesce(c.counts, '{}'::jsonb), coalesce(st.n, 0)::integer,
           CASE WHEN c.oldest IS NULL THEN NULL
                ELSE greatest(extract(epoch FROM (clock.now - c.oldest))::double precision, 0)
           END
      FROM drainpipe.agent_inboxes i
      CROSS JOIN clock
      LEFT JOIN per_inbox c ON c.inbox_id = i.id
      LEFT JOIN streams st ON st.inbox_id = i.id
     ORDER BY i.name, i.id $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_inbox_v1(p_id text)
 RETURNS SETOF drainpipe.agent_inbox_v1 LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT i.id, i.name, i.lease_seconds, i.hold_seconds, i.max_attempts, i.default_order,
           i.default_ack, i.allowed_ack, i.priority_path, i.view_paths, i.view_max_bytes
      FROM drainpipe.agent_inboxes i WHERE i.id = p_id $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_lock_event(p_id bigint, p_inboxes text[], p_now timestamp with time zone)
 RETURNS drainpipe.agent_events LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_next_v1(p_inbox text, p_order text, p_max integer, p_ack text, p_type text DEFAULT NULL::text, p_source text DEFAULT NULL::text, p_subscription text DEFAULT NULL::text, p_correlation text DEFAULT NULL::text, p_principal text DEFAULT NULL::text, p_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_event_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' SET plan_cache_mode TO 'force_generic_plan' SET enable_bitmapscan TO 'off' AS $function$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_lease integer;
    v_ids bigint[];
    v_rows drainpipe.agent_event_v1[];
    v_pull drainpipe.agent_pulls;
    v_until timestamptz;
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
    IF p_key IS NULL AND p_order <> 'priority' THEN
        -- the common pull in one statement: pick (fifo or lifo; the other order's scan is
        -- a one-time filter that never runs), hand out, read the bodies
        v_until := CASE WHEN p_ack = 'manual' THEN v_now + make_interval(secs => v_lease) END;
        RETURN QUERY
        WITH oldest AS (
            SELECT x.id, x.due_at,
                   drainpipe.agent_event_ends(x.hold_until, x.delivery, x.max_attempts, v_now) AS ends
              FROM drainpipe.agent_events x
             WHERE p_order = 'fifo'
               AND pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED
        ), newest AS (
            SELECT x.id, x.due_at,
                   drainpipe.agent_event_ends(x.hold_until, x.delivery, x.max_attempts, v_now) AS ends
              FROM drainpipe.agent_events x
             WHERE p_order = 'lifo'
               AND pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at DESC, x.id DESC
             LIMIT p_max
               FOR UPDATE SKIP LOCKED
        ), picked AS (
            SELECT * FROM oldest UNION ALL SELECT * FROM newest
        ), changed AS (
            -- agent_hand_out's update, with whether the event is spent worked out once
            UPDATE drainpipe.agent_events e
               SET state = coalesce(p.ends, CASE WHEN p_ack = 'pickup' THEN 'delivered' ELSE 'leased' END),
                   last_op = CASE p.ends WHEN 'expired' THEN 'hold' WHEN 'failed' THEN 'attempts'
                       ELSE CASE p_ack WHEN 'pickup' THEN 'pickup' ELSE 'handout' END END,
                   last_error = CASE p.ends WHEN 'expired' THEN 'The event waited past hold_seconds'
                       WHEN 'failed' THEN coalesce(e.last_error, 'The lease ran out on the last delivery')
                       ELSE e.last_error END,
                   delivery = CASE WHEN p.ends IS NULL THEN e.delivery + 1 ELSE e.delivery END,
                   ack_mode = CASE WHEN p.ends IS NULL THEN p_ack ELSE e.ack_mode END,
                   lease_token = CASE WHEN p.ends IS NOT NULL THEN e.lease_token
                       WHEN p_ack = 'manual' THEN gen_random_uuid() END,
                   lease_until = CASE WHEN p.ends IS NULL THEN v_until END,
                   due_at = CASE WHEN p.ends IS NULL AND v_until IS NOT NULL THEN v_until ELSE e.due_at END,
                   settled_at = CASE WHEN p.ends IS NOT NULL OR p_ack = 'pickup' THEN v_now END
              FROM picked p
             WHERE e.id = p.id
            RETURNING e.id, e.inbox_id, e.source, e.event_type, e.received_at, e.state, e.delivery,
                      e.ack_mode, e.lease_token, e.lease_until, e.subscription_id, e.message_id,
                      p.due_at AS was_due, p.ends
        )
        SELECT 'handed'::text, c.id, c.inbox_id, c.source, w.app, c.event_type, c.received_at,
               coalesce(w.verified, false), w.payload, c.state, c.delivery, c.ack_mode,
               c.lease_token, c.lease_until, c.subscription_id
          FROM changed c
          LEFT JOIN drainpipe.webhook_inbox w ON w.id = c.message_id
         WHERE c.ends IS NULL
         -- the order picked: one pair of keys is NULL throughout
         ORDER BY CASE WHEN p_order = 'fifo' THEN c.was_due END,
                  CASE WHEN p_order = 'fifo' THEN c.id END,
                  CASE WHEN p_order = 'lifo' THEN c.was_due END DESC,
                  CASE WHEN p_order = 'lifo' THEN c.id END DESC;
        RETURN;
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
             WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
    ELSIF p_order = 'lifo' THEN
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.due_at DESC, x.id DESC
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
    ELSE
        -- highest priority first, then oldest due: the ranked index holds the events of
        -- priority other than 0 only (an inbox without priority_path has none, and its
        -- hand-outs and acks maintain one index less), so the events of priority 0 come
        -- from the due index, between those above 0 and those below
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND x.priority > 0
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.priority DESC, x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
        IF cardinality(v_ids) < p_max THEN
            v_ids := v_ids || ARRAY(
                SELECT x.id FROM drainpipe.agent_events x
                 WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
                   AND x.priority = 0
                   AND (p_type IS NULL OR x.event_type = p_type)
                   AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
                   AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
                 ORDER BY x.due_at, x.id
                 LIMIT p_max - cardinality(v_ids)
                   FOR UPDATE SKIP LOCKED);
        END IF;
        IF cardinality(v_ids) < p_max THEN
            v_ids := v_ids || ARRAY(
                SELECT x.id FROM drainpipe.agent_events x
                 WHERE pg_catalog.hashtext(x.inbox_id) = pg_catalog.hashtext(p_inbox) AND x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
                   AND x.priority < 0
                   AND (p_type IS NULL OR x.event_type = p_type)
                   AND (p_source IS NULL OR x.source = p_source OR 'src_' || left(md5(x.source), 16) = p_source)
                   AND (p_subscription IS NULL OR x.subscription_id = p_subscription) AND (p_correlation IS NULL OR x.correlation = p_correlation)
                 ORDER BY x.priority DESC, x.due_at, x.id
                 LIMIT p_max - cardinality(v_ids)
                   FOR UPDATE SKIP LOCKED);
        END IF;
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_priority(p_payload jsonb, p_path text[])
 RETURNS double precision LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT CASE
        WHEN p_path IS NULL THEN 0::double precision
        WHEN jsonb_typeof(p_payload #> p_path) = 'number'
          OR (jsonb_typeof(p_payload #> p_path) = 'string'
              AND (p_payload #>> p_path) ~ '^\s*[-+]?(\d{1,200}(\.\d{0,200})?|\.\d{1,200})([eE][-+]?\d{1,3})?\s*$')
        THEN greatest(-1e300, least(1e300, (p_payload #>> p_path)::numeric))::double precision
        ELSE 0::double precision
    END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_raw_v2(p_id bigint, p_inboxes text[] DEFAULT NULL::text[])
 RETURNS TABLE(inbox_id text, body bytea) LANGUAGE sql STABLE SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT e.inbox_id, coalesce(w.raw, convert_to(w.payload::text, 'UTF8'))
      FROM drainpipe.agent_events e
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     WHERE e.id = p_id AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_release_v1(p_id bigint, p_delivery integer, p_token uuid, p_delay double precision DEFAULT 0, p_error text DEFAULT NULL::text, p_inboxes text[] DEFAULT NULL::text[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF drainpipe.agent_settlement_v1 LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_stream_acquire_v1(p_inbox text, p_holder text, p_seconds double precision, p_limit integer DEFAULT 10, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_stream_release_v1(p_inbox text, p_slot integer, p_holder text)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    DELETE FROM drainpipe.agent_stream_slots s
     WHERE s.inbox_id = p_inbox AND s.slot = p_slot AND s.holder = p_holder;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_stream_renew_v1(p_inbox text, p_slot integer, p_holder text, p_seconds double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    UPDATE drainpipe.agent_stream_slots s
       SET until = coalesce(p_now, clock_timestamp()) + make_interval(secs => p_seconds)
     WHERE s.inbox_id = p_inbox AND s.slot = p_slot AND s.holder = p_holder;
    RETURN FOUND;
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_subscribe_v1(p_inbox text, p_source text, p_types text[], p_where jsonb, p_correlation_path text[])
 RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
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
END $function$;

CREATE OR REPLACE FUNCTION drainpipe.agent_where_matches(p_payload jsonb, p_where jsonb)
 RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
    SELECT p_where IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_each(p_where) AS w(key, value)
         WHERE (p_payload #> string_to_array(w.key, '.')) IS DISTINCT FROM w.value) $function$;

-- Triggers
CREATE OR REPLACE TRIGGER agent_fan_out AFTER INSERT ON drainpipe.webhook_inbox FOR EACH ROW EXECUTE FUNCTION drainpipe.agent_fan_out();

RESET check_function_bodies;
