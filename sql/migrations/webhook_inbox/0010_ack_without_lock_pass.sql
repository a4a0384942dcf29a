-- webhook-inbox 0010: a batch of acks takes no lock pass (issue 17), the same rules.
--
-- agent_ack_many_v1 (0005) first locked every quoted event in id order, then acked the
-- current leases in one UPDATE, then settled the rest one by one through agent_ack_v1. The
-- lock pass was there so that two batches over the same events could not deadlock. It
-- writes a row lock (and its WAL record) for every event, and the UPDATE then locks the
-- rows again: in bench.agent_server, 4 clients, the pull+ack cycle ran 2-4% faster without
-- it (docs/benchmarks.md, "Fifth round").
--
-- Without the lock pass, the UPDATE alone is not enough. Take two batches, each holding the
-- current lease of one event and a stale lease of the other: each UPDATE locks its
-- current event, and each one-by-one pass then waited, in agent_ack_v1's lock, for the
-- event the other batch had locked. So the one-by-one pass now answers a stale lease from
-- the event's row without locking it: a stale lease never becomes current again, so
-- nothing a lock would wait for can change that answer. Only what may still change (a
-- repeat of this lease, a spent event, an id twice) goes through agent_ack_v1.
-- tests/agents/test_races.py has the crossed leases (they deadlock without this).

CREATE OR REPLACE FUNCTION drainpipe.agent_ack_many_v1(
    p_ids bigint[],
    p_deliveries integer[],
    p_tokens uuid[],
    p_outcomes jsonb[],
    p_inboxes text[] DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (n_at bigint, ok boolean, inbox text, state_now text, lease_ends timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    -- a parameter, not the literal (0004): the generic plan reads the primary key only
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
        -- unnest(...) may hash the whole table (0005)
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
END
$$;
