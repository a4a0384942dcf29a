-- webhook-inbox 0011: the acks an agent made since its last pull ride with its next pull,
-- in one call and one transaction (issue 17), each still fenced by its own lease.
--
-- An agent's loop is pull, act, ack, pull. Sent apart, the acks of a pull and the next pull
-- are two round trips and two commits (each a WAL flush); sent together they are one.
-- agent_ack_next_v1 runs agent_ack_many_v1 (0010) and then agent_next_v1 (0009) with the
-- same arguments as when they are called alone, so every rule of both holds as it is: the
-- acks lock only the events they ack, in id order, and answer a stale lease without a lock;
-- the pull locks only what it hands out, SKIP LOCKED, after the acks. The pull never waits
-- for a lock, so a call that waits does so in its ack part, before it holds any lock of its
-- pull: two calls cannot wait for each other in more ways than two ack batches can.
--
-- One row type carries both answers, so one column list reads them. An ack's row has
-- outcome 'ack', id its position in the batch (1-based), inbox_id and source its inbox,
-- state and event_type the event's state now, verified its ok, lease_until its lease's end;
-- the pull's rows follow, exactly as agent_next_v1 returns them. An ack whose event does
-- not exist (within p_ack_inboxes) has no row, as in agent_ack_many_v1.

CREATE OR REPLACE FUNCTION drainpipe.agent_ack_next_v1(
    p_ids bigint[],
    p_deliveries integer[],
    p_tokens uuid[],
    p_outcomes jsonb[],
    p_ack_inboxes text[],
    p_ack_now timestamptz,
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
AS $$
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
END
$$;
