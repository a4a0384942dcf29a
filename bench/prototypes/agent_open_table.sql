-- A storage shape for the agent inbox, measured on the server only (issue 17). This is NOT
-- installed by anything: a prototype to measure the next step, written down so it can be
-- run again. `git show 9b265e0:docs/benchmarks.md` ("A storage shape, measured on the server") has the
-- numbers. Built in full as a migration with every rule of the contract (the "Fifth
-- round" there, branch experiment/open-events), the shape was no faster than today's:
-- its cheaper hand-out was paid back by a costlier ack.
--
-- Today a hand-out rewrites the event's wide row (15 columns of agent_events) and adds an
-- entry to each of its three partial indexes, and an ack rewrites that row again. Here the
-- open events also have a narrow row of their own in drainpipe.proto_open: a hand-out
-- rewrites only that row (two index entries, or three with a peek index). An ack deletes
-- it and marks the record acked. The record's table has no partial index and a fillfactor
-- of 90, so the ack is a HOT update. What the prototype leaves out, and a real migration
-- would need: the spent checks (hold_until and max_attempts would move to the open row),
-- the filters (type, source, subscription, correlation), priority, keyed pulls, claim,
-- release and extend, the fallback of a stale ack, and the fan-out writing both rows.
--
-- How it was run (PostgreSQL 15, a database with drainpipe's jobs and webhook-inbox
-- modules and an inbox 'bench' subscribed to the source 'bench', filled with stored
-- webhooks as bench/agent_inbox.py does):
--   1. this file (psql -f);
--   2. before each run, 65,000 open events in each shape and as many pgmq messages,
--      then VACUUM of every table involved and a CHECKPOINT;
--   3. pgbench -n -c4 -j2 -t 1500 -M prepared -f <script>, interleaved, with the scripts
--        SELECT array_agg(id)::text AS ids, array_agg(delivery)::text AS dels,
--               array_agg(lease_token)::text AS toks, max(length(payload::text))
--          FROM drainpipe.proto_next('<inbox id>', 10) \gset
--        SELECT * FROM drainpipe.proto_ack(:ids::bigint[], :dels::integer[], :toks::uuid[]);
--      against the same two lines over agent_next_v1 / agent_ack_many_v1, and against
--        SELECT array_agg(msg_id)::text AS ids, max(length(message::text))
--          FROM pgmq.read('q', 3600, 10) \gset
--        SELECT pgmq.archive('q', :ids::bigint[]);

CREATE TABLE IF NOT EXISTS drainpipe.proto_events (
    LIKE drainpipe.agent_events INCLUDING DEFAULTS INCLUDING IDENTITY
) WITH (fillfactor = 90);
ALTER TABLE drainpipe.proto_events DROP CONSTRAINT IF EXISTS proto_events_pkey;
ALTER TABLE drainpipe.proto_events ADD CONSTRAINT proto_events_pkey PRIMARY KEY (id);

CREATE TABLE IF NOT EXISTS drainpipe.proto_open (
    event_id bigint PRIMARY KEY,
    inbox_key integer NOT NULL,  -- hashtext(inbox_id)
    inbox_id text NOT NULL,
    due_at timestamptz NOT NULL,
    delivery integer NOT NULL DEFAULT 0,
    lease_token uuid,
    lease_until timestamptz
);
CREATE INDEX IF NOT EXISTS proto_open_due ON drainpipe.proto_open (inbox_key, due_at, event_id);
-- the peek's index: measured with and without it
CREATE INDEX IF NOT EXISTS proto_open_peek ON drainpipe.proto_open (inbox_key, event_id);

-- the open rows of what the fan-out would have stored (one per record not settled)
CREATE OR REPLACE FUNCTION drainpipe.proto_fill(p_inbox text, p_count integer)
RETURNS void
LANGUAGE sql
AS $$
    WITH made AS (
        INSERT INTO drainpipe.proto_events (inbox_id, message_id, subscription_id, source,
                                            event_type, state, hold_until, due_at, received_at)
        SELECT e.inbox_id, e.message_id, e.subscription_id, e.source, e.event_type, 'pending',
               now() + interval '7 days', now() - interval '1 hour' + g * interval '1 ms', now()
          FROM (SELECT x.*, row_number() OVER () AS g FROM drainpipe.agent_events x
                 WHERE x.inbox_id = p_inbox LIMIT p_count) e
        RETURNING id, inbox_id, due_at
    )
    INSERT INTO drainpipe.proto_open (event_id, inbox_key, inbox_id, due_at)
    SELECT id, hashtext(inbox_id), inbox_id, due_at FROM made;
$$;

CREATE OR REPLACE FUNCTION drainpipe.proto_next(p_inbox text, p_max integer)
RETURNS SETOF drainpipe.agent_event_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_lease integer;
    v_until timestamptz;
BEGIN
    SELECT i.lease_seconds INTO v_lease FROM drainpipe.agent_inboxes i WHERE i.id = p_inbox;
    v_until := v_now + make_interval(secs => v_lease);
    RETURN QUERY
    WITH picked AS (
        SELECT o.event_id, o.due_at FROM drainpipe.proto_open o
         WHERE o.inbox_key = hashtext(p_inbox) AND o.inbox_id = p_inbox AND o.due_at <= v_now
         ORDER BY o.due_at, o.event_id LIMIT p_max FOR UPDATE SKIP LOCKED
    ), changed AS (
        -- the narrow row only: the record is not touched until the event is settled
        UPDATE drainpipe.proto_open o
           SET due_at = v_until, delivery = o.delivery + 1, lease_token = gen_random_uuid(),
               lease_until = v_until
          FROM picked p WHERE o.event_id = p.event_id
        RETURNING o.event_id, o.delivery, o.lease_token, o.lease_until, p.due_at AS was_due
    )
    SELECT 'handed'::text, e.id, e.inbox_id, e.source, w.app, e.event_type, e.received_at,
           coalesce(w.verified, false), w.payload, 'leased'::text, c.delivery, 'manual'::text,
           c.lease_token, c.lease_until, e.subscription_id
      FROM changed c
      JOIN drainpipe.proto_events e ON e.id = c.event_id
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     ORDER BY c.was_due, c.event_id;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.proto_ack(
    p_ids bigint[], p_deliveries integer[], p_tokens uuid[]
)
RETURNS TABLE (n_at bigint, ok boolean, inbox text, state_now text, lease_ends timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    WITH gone AS (
        DELETE FROM drainpipe.proto_open o
         WHERE o.event_id = ANY (p_ids)
           AND o.delivery = p_deliveries[array_position(p_ids, o.event_id)]
           AND o.lease_token = p_tokens[array_position(p_ids, o.event_id)]
        RETURNING o.event_id
    ), acked AS (
        -- no indexed column changes: a HOT update where the page has room
        UPDATE drainpipe.proto_events e
           SET state = 'acked', last_op = 'ack', settled_at = v_now
          FROM gone g WHERE e.id = g.event_id
        RETURNING array_position(p_ids, e.id)::bigint AS n, e.inbox_id
    )
    SELECT a.n, true, a.inbox_id, 'acked'::text, NULL::timestamptz FROM acked a;
END
$$;
