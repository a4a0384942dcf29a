-- webhook-inbox 0005: cheaper hand-outs and acks of the agent inbox (issue 17), the same
-- rules. 0004 may be installed already: what changes here is replaced or rebuilt, never
-- edited there, and this file runs again as it is (IF EXISTS / IF NOT EXISTS / OR REPLACE).
--
-- Index work per event. Every hand-out moves due_at and every ack moves the state out of
-- the partial indexes' predicate, so neither is a HOT update and each adds an entry to
-- every index the new row version belongs to: with 0004's four indexes a hand-out added
-- four and an ack two (pgmq's read and archive add four in all). Now:
--   * peek pages (inbox_id, id) over open events only, as agent_events_v1 asks: an acked
--     or otherwise settled event leaves that index (an ack adds one entry, the primary
--     key's). Deleting an inbox (ON DELETE CASCADE, no API does it) then scans the table.
--   * the priority order's index holds the events whose priority is not 0: an inbox
--     without priority_path (all 0) never adds to it; agent_next_v1 takes the events of
--     priority 0 from the due index, between those above and those below.

DROP INDEX IF EXISTS drainpipe.agent_events_inbox_idx;
CREATE INDEX IF NOT EXISTS agent_events_open_idx
    ON drainpipe.agent_events (inbox_id, id) WHERE state IN ('pending', 'leased');
DROP INDEX IF EXISTS drainpipe.agent_events_priority_idx;
CREATE INDEX IF NOT EXISTS agent_events_ranked_idx
    ON drainpipe.agent_events (inbox_id, priority DESC, due_at, id)
    WHERE state IN ('pending', 'leased') AND priority <> 0;

-- next: as in 0004 but for the priority order's three steps.
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
        -- highest priority first, then oldest due: the ranked index holds the events of
        -- priority other than 0 only (an inbox without priority_path has none, and its
        -- hand-outs and acks maintain one index less), so the events of priority 0 come
        -- from the due index, between those above 0 and those below
        v_ids := ARRAY(
            SELECT x.id FROM drainpipe.agent_events x
             WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
               AND x.priority > 0
               AND (p_type IS NULL OR x.event_type = p_type)
               AND (p_source IS NULL OR x.source = p_source
                    OR 'src_' || left(md5(x.source), 16) = p_source)
               AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
               AND (p_correlation IS NULL OR x.correlation = p_correlation)
             ORDER BY x.priority DESC, x.due_at, x.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED);
        IF cardinality(v_ids) < p_max THEN
            v_ids := v_ids || ARRAY(
                SELECT x.id FROM drainpipe.agent_events x
                 WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
                   AND x.priority = 0
                   AND (p_type IS NULL OR x.event_type = p_type)
                   AND (p_source IS NULL OR x.source = p_source
                        OR 'src_' || left(md5(x.source), 16) = p_source)
                   AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
                   AND (p_correlation IS NULL OR x.correlation = p_correlation)
                 ORDER BY x.due_at, x.id
                 LIMIT p_max - cardinality(v_ids)
                   FOR UPDATE SKIP LOCKED);
        END IF;
        IF cardinality(v_ids) < p_max THEN
            v_ids := v_ids || ARRAY(
                SELECT x.id FROM drainpipe.agent_events x
                 WHERE x.inbox_id = p_inbox AND x.state IN ('pending', 'leased') AND x.due_at <= v_now
                   AND x.priority < 0
                   AND (p_type IS NULL OR x.event_type = p_type)
                   AND (p_source IS NULL OR x.source = p_source
                        OR 'src_' || left(md5(x.source), 16) = p_source)
                   AND (p_subscription IS NULL OR x.subscription_id = p_subscription)
                   AND (p_correlation IS NULL OR x.correlation = p_correlation)
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
END
$$;


-- Several acks in one call, as in 0004, but done when its UPDATE acked every position: the
-- pass over the others through agent_ack_v1 (stale leases, repeats, spent events, an id
-- twice) is a statement of its own, worth skipping when nothing is left for it.
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
    IF cardinality(v_done) = cardinality(p_ids) THEN
        RETURN;  -- every position acked by the UPDATE: nothing left to settle one by one
    END IF;
    RETURN QUERY
    SELECT f.n, r.ok, r.inbox_id, r.state, r.lease_until
      FROM unnest(p_ids, p_deliveries, p_tokens, p_outcomes) WITH ORDINALITY
           AS f(id, delivery, token, outcome, n)
     CROSS JOIN LATERAL drainpipe.agent_ack_v1(f.id, f.delivery, f.token, f.outcome, p_inboxes, v_now) AS r
     WHERE f.n <> ALL (coalesce(v_done, '{}'))
     ORDER BY f.n;
END
$$;
