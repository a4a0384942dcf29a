-- jobs 0022: a concurrency that does not bind costs almost nothing (docs/flow-control.md,
-- "What it costs").
--
-- Until now every claim of a queue limited by `concurrency` alone counted its leased jobs
-- under the queue's flow lock (jobs 0015, 0017): an index walk over the lease window, dead
-- entries of completed jobs included. Here such a queue gets a budget instead: a claim that
-- counts exactly (under the exclusive flow lock, so every claim before it has committed)
-- opens an epoch with cap = concurrency - leased, when that is far from binding. Claims then
-- take their room from the epoch without counting: a session takes a chunk of it (one row
-- update per chunk, not per claim: a row updated per claim would pile versions behind any
-- held snapshot) and spends it locally, batch by batch, holding the flow lock shared.
--
-- Why no instant goes over the limit: the epoch changes only under the exclusive lock
-- (which waits for every claim holding it shared), so while epoch E is open every job
-- leased since it opened was taken from a chunk of E (or by the claim that opened it), and
-- leased <= L_E + granted_E <= L_E + cap_E = concurrency. A session spends a chunk only
-- after seeing, under the shared lock, that its epoch is still the open one. A claim that
-- finds the budget spent or closed before taking a lock counts under the exclusive lock
-- (and opens the next epoch, or closes it near the limit); one that finds it spent only
-- after taking the shared lock (it cannot wait for the exclusive one while holding it)
-- closes the epoch and counts, adding every chunk of the epoch to the count as leased
-- (they may be spent by claims in flight); those claims wait for one another on the row.
-- A change of the queue's limits closes the epoch (ensure_queue_flow_v1), so a claim
-- under other limits (a per-key pick, a rate) never shares an epoch with spent chunks.

CREATE TABLE IF NOT EXISTS drainpipe.flow_budget (
    queue text PRIMARY KEY,
    -- the xid of the claim that opened the epoch; NULL: closed (claims count)
    epoch bigint,
    -- the queue's concurrency when the epoch opened
    concurrency integer NOT NULL,
    -- concurrency - leased, counted when the epoch opened
    cap bigint NOT NULL,
    -- what the epoch handed out (chunks, and the opening claim's own room)
    granted bigint NOT NULL
);
ALTER TABLE drainpipe.flow_budget ENABLE ROW LEVEL SECURITY;

-- What a session takes of the budget at once: 1/64 of the concurrency, 200 to 1,000 jobs
-- (the row is updated once per chunk; the chunks sessions hold back unspent are at most
-- one each).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_chunk(p_concurrency integer)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(1000, greatest(200, p_concurrency / 64))::bigint
$$;

-- Whether p_flow's claims may take their room from a budget: a concurrency and no other
-- limit (a rate or a per-key limit needs the claim to look at each job under the lock).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_applies(p_flow drainpipe.queue_flow)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_flow.concurrency IS NOT NULL AND p_flow.rate_count IS NULL
       AND p_flow.key_concurrency IS NULL AND p_flow.key_rate_count IS NULL
       AND NOT p_flow.ordered
$$;

-- The room of a claim of p_batch on a queue where flow_budget_applies, taken from the
-- queue's budget; NULL when there is none to take and the caller must count under the
-- exclusive flow lock (it holds no flow lock then).
-- The count is the caller's (its storage's), so that case returns -1, with the shared lock
-- held and what the closed epoch handed out in flow_budget_pending: the caller counts and
-- adds it.
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_take(p_flow drainpipe.queue_flow, p_batch integer)
RETURNS integer
-- no SET clause: runs under its callers', the claim functions (as flow_room)
LANGUAGE plpgsql
AS $$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_name text := 'drainpipe.flow_budget.' || p_flow.queue;
    v_kept text := current_setting(v_name, true);
    v_epoch bigint;
    v_left bigint := 0;
    v_row drainpipe.flow_budget;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) OR p_batch > 100 THEN
        RETURN NULL;
    END IF;
    IF v_kept IS NOT NULL AND v_kept <> '' THEN
        v_epoch := split_part(v_kept, ':', 1)::bigint;
        v_left := split_part(v_kept, ':', 2)::bigint;
    END IF;
    -- a first look, without a lock: is there a budget to take? (a chunk to take with another
    -- to spare, so that claims beside this one rarely spend the last before it locks)
    SELECT * INTO v_row FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
    IF v_row.epoch IS NULL OR v_row.concurrency <> p_flow.concurrency
       OR NOT ((v_epoch = v_row.epoch AND v_left >= p_batch) OR v_row.granted + 2 * c_chunk <= v_row.cap) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    -- again under the lock: the epoch cannot change before this claim commits
    SELECT * INTO v_row FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
    IF v_row.epoch IS NOT NULL AND v_row.concurrency = p_flow.concurrency THEN
        IF v_epoch IS DISTINCT FROM v_row.epoch THEN
            v_left := 0;
        END IF;
        IF v_left < p_batch THEN
            UPDATE drainpipe.flow_budget b SET granted = b.granted + c_chunk
             WHERE b.queue = p_flow.queue AND b.epoch = v_row.epoch AND b.granted + c_chunk <= b.cap;
            IF FOUND THEN
                v_left := v_left + c_chunk;
            END IF;
        END IF;
        IF v_left >= p_batch THEN
            PERFORM set_config(v_name, v_row.epoch || ':' || (v_left - p_batch), false);
            RETURN p_batch;
        END IF;
    END IF;
    -- spent (or closed) since the first look: close it, waiting for the claims doing the
    -- same (on the row); what it handed out counts as leased (see the header)
    UPDATE drainpipe.flow_budget b SET epoch = NULL WHERE b.queue = p_flow.queue
    RETURNING b.granted INTO v_left;
    PERFORM set_config(v_name, '', false);
    PERFORM set_config('drainpipe.flow_budget_pending.' || p_flow.queue, coalesce(v_left, -1)::text, true);
    RETURN -1;
END
$$;

-- After the count of a claim that flow_budget_take answered -1: what the closed epoch
-- handed out, to add to the count (-1: the row is gone, take nothing).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_pending(p_queue text)
RETURNS bigint
LANGUAGE sql
AS $$
    SELECT current_setting('drainpipe.flow_budget_pending.' || p_queue)::bigint
$$;

-- After the exact count of a claim under the exclusive flow lock (p_leased, of which it
-- takes p_room): opens a new epoch when the limit is far (16 chunks left: a quarter of the
-- concurrency from 12,800 on), else closes the open one. Writes the row only
-- when that changes something, so claims near the limit do not update it each time.
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_reset(
    p_flow drainpipe.queue_flow, p_leased bigint, p_room integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_cap bigint := p_flow.concurrency - p_leased;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) THEN
        -- other limits: no epoch is open (the change of limits closed it), nothing to do
        RETURN;
    END IF;
    -- this session's own leftover was counted as nothing: forget it
    PERFORM set_config('drainpipe.flow_budget.' || p_flow.queue, '', false);
    IF v_cap - p_room >= 16 * c_chunk THEN
        INSERT INTO drainpipe.flow_budget AS b (queue, epoch, concurrency, cap, granted)
        VALUES (p_flow.queue, pg_current_xact_id()::text::bigint, p_flow.concurrency, v_cap, p_room)
        ON CONFLICT (queue) DO UPDATE
           SET epoch = excluded.epoch, concurrency = excluded.concurrency,
               cap = excluded.cap, granted = excluded.granted;
    ELSE
        UPDATE drainpipe.flow_budget b SET epoch = NULL, granted = 0
         WHERE b.queue = p_flow.queue AND (b.epoch IS NOT NULL OR b.granted <> 0);
    END IF;
END
$$;

-- jobs 0015's, closing the queue's budget (claims under the new limits count first), and
-- building the flow indexes once the row says what the limits are.
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(
    p_queue text, p_concurrency integer, p_key_concurrency integer,
    p_rate_count integer, p_rate_per double precision,
    p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- jobs 0022: granted stays (chunks in flight still count until an exact count)
    UPDATE drainpipe.flow_budget b SET epoch = NULL WHERE b.queue = p_queue AND b.epoch IS NOT NULL;
    IF p_concurrency IS NULL AND p_key_concurrency IS NULL AND p_rate_count IS NULL
       AND p_key_rate_count IS NULL AND NOT coalesce(p_ordered, false) THEN
        DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;
        RETURN;
    END IF;
    INSERT INTO drainpipe.queue_flow AS f (queue, concurrency, key_concurrency, rate_count,
                                           rate_per, key_rate_count, key_rate_per, ordered)
    VALUES (p_queue, p_concurrency, p_key_concurrency, p_rate_count, p_rate_per,
            p_key_rate_count, p_key_rate_per, coalesce(p_ordered, false))
    ON CONFLICT (queue) DO UPDATE
       SET concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
           rate_count = excluded.rate_count, rate_per = excluded.rate_per,
           key_rate_count = excluded.key_rate_count, key_rate_per = excluded.key_rate_per,
           ordered = excluded.ordered;
    -- after the row: pgmq builds the indexes the new limits read (jobs 0022)
    PERFORM drainpipe.ensure_flow_indexes(p_queue);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.drop_queue_policy_v1(p_queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM drainpipe.queue_pending WHERE queue = p_queue;
    UPDATE drainpipe.flow_budget SET epoch = NULL WHERE queue = p_queue AND epoch IS NOT NULL;  -- jobs 0022
    DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;  -- jobs 0015
    DELETE FROM drainpipe.queue_policies WHERE queue = p_queue;
    RETURN FOUND;
END
$$;
