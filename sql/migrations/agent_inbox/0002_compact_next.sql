-- agent_next_v1 as before, its event filter on fewer lines (the same statements, token for
-- token: the plans stay as they were).

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
