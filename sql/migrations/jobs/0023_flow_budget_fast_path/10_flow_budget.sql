-- jobs 0023: a concurrency that does not bind costs almost nothing (docs/flow-control.md,
-- "What it costs"), continued from jobs 0022.
--
-- A claim spending its session's chunk (jobs 0022) still read the budget's row twice, once
-- before the shared flow lock and once under it, to learn that the chunk's epoch was still
-- the open one: two statements, about a third of what the plain claim itself costs. Here a
-- session that holds enough of its chunk learns it without a statement: each limited queue
-- has a sequence (drainpipe.flow_budget__<queue>) that every change of its budget under the
-- exclusive flow lock, and every change of its limits, advances before writing the row,
-- and the row keeps the value it was written with (stamp). A session that saw its chunk's
-- epoch open in a row whose stamp was the sequence's value (so no change was pending, not
-- even an uncommitted one) keeps that value beside its chunk; while the sequence still
-- reads it, under the shared lock, nothing changed the budget since: it spends, with no
-- statement (flow_budget_spend: a sequence read before the lock and one under it).
--
-- Why that is exact: a sequence advances at once, not at commit. A change under the
-- exclusive lock (an epoch opened or closed by an exact count) advances it while no claim
-- holds the shared lock, so any claim after it reads the new value. A change of limits
-- (ensure_queue_flow_v1, drop_queue_policy_v1) advances it before its row is written: a
-- session reading the row before that commits sees a stamp behind the sequence and keeps
-- no value, so its next claim reads the row again. A sequence advanced by a change that
-- rolled back only sends claims to the row until the next exact count stamps a new epoch.
-- The one change that does not advance it, a claim closing a spent epoch under the shared
-- lock, counts every chunk the epoch handed out as leased, so chunks spent after it stay
-- within what it counted (jobs 0022's header).

-- the sequence's value when the row was last written by a change (NULL: older than 0023)
ALTER TABLE drainpipe.flow_budget ADD COLUMN IF NOT EXISTS stamp bigint;

-- The sequence that p_queue's budget changes advance (NULL when the queue has none yet).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_sequence(p_queue text)
RETURNS regclass
LANGUAGE sql STABLE
AS $$
    SELECT to_regclass('drainpipe.' || quote_ident('flow_budget__' || p_queue))
$$;

-- Advances p_queue's budget sequence, before a change of its budget is written: the new
-- value, the row's stamp (NULL when the queue has no sequence).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_advance(p_queue text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_sequence regclass := drainpipe.flow_budget_sequence(p_queue);
BEGIN
    IF v_sequence IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN nextval(v_sequence);
END
$$;

-- A session's chunk is kept as 'epoch:left:seen:sequence': seen, the sequence's value the
-- epoch was checked at (empty: check the row), sequence, its oid.

-- The room of a claim of p_batch from the session's chunk, when the budget did not change
-- since the session checked its epoch (see the header): p_batch, with the shared flow lock
-- held; NULL when the caller must take the room by flow_budget_take (no lock taken, unless
-- the sequence moved while this claim waited for the lock: flow_budget_take then goes on
-- under it). -1 as flow_budget_take's.
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_spend(p_queue text, p_batch integer)
RETURNS integer
-- no SET clause: runs under its callers', the claim functions
LANGUAGE plpgsql
AS $$
DECLARE
    v_name text := 'drainpipe.flow_budget.' || p_queue;
    v_kept text := current_setting(v_name, true);
    v_left bigint;
    v_seen bigint;
    v_sequence oid;
    v_set text;
    v_flow drainpipe.queue_flow;
BEGIN
    IF v_kept IS NULL OR split_part(v_kept, ':', 3) = '' OR p_batch > 100 THEN
        RETURN NULL;
    END IF;
    v_left := split_part(v_kept, ':', 2)::bigint;
    IF v_left < p_batch THEN
        RETURN NULL;
    END IF;
    v_seen := split_part(v_kept, ':', 3)::bigint;
    v_sequence := split_part(v_kept, ':', 4)::oid;
    -- before the lock: a change since the session checked sends it to the row, free to
    -- count under the exclusive lock
    IF pg_sequence_last_value(v_sequence) IS DISTINCT FROM v_seen THEN
        RETURN NULL;
    END IF;
    IF NOT pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue)) THEN
        PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue));
    END IF;
    v_set := set_config('drainpipe.flow_budget_locked.' || p_queue, 'on', true);
    -- under the lock: no exact count runs, and none ran since the session checked
    IF pg_sequence_last_value(v_sequence) IS NOT DISTINCT FROM v_seen THEN
        v_set := set_config(v_name, split_part(v_kept, ':', 1) || ':' || (v_left - p_batch) || ':'
                                    || v_seen || ':' || v_sequence, false);
        RETURN p_batch;
    END IF;
    -- a count ran while this claim waited for the lock: the row decides, under it
    SELECT * INTO v_flow FROM drainpipe.queue_flow f WHERE f.queue = p_queue;
    RETURN drainpipe.flow_budget_take(v_flow, p_batch);
END
$$;

-- jobs 0022's, reading the budget's row in fewer statements, keeping with the session's
-- chunk the sequence value it checked the epoch at, and going on under the shared lock
-- when flow_budget_spend took it (it never returns NULL then: the caller cannot count
-- under the exclusive lock while it holds the shared one).
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_take(p_flow drainpipe.queue_flow, p_batch integer)
RETURNS integer
-- no SET clause: runs under its callers', the claim functions (as flow_room)
LANGUAGE plpgsql
AS $$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_name text := 'drainpipe.flow_budget.' || p_flow.queue;
    v_kept text := current_setting(v_name, true);
    v_locked boolean := coalesce(current_setting('drainpipe.flow_budget_locked.' || p_flow.queue, true) = 'on', false);
    v_epoch bigint;
    v_left bigint := 0;
    v_open bigint;
    v_stamp bigint;
    v_sequence regclass;
    v_now_at bigint;
    v_seen text;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) OR p_batch > 100 THEN
        IF v_locked THEN
            -- other limits since the shared lock was taken: take nothing this time
            v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue, '-1', true);
            RETURN -1;
        END IF;
        RETURN NULL;
    END IF;
    IF v_kept <> '' THEN
        v_epoch := split_part(v_kept, ':', 1)::bigint;
        v_left := split_part(v_kept, ':', 2)::bigint;
    END IF;
    IF NOT v_locked THEN
        -- the first look, without a lock: is there a budget to take? (the session's chunk,
        -- or a chunk to take with another to spare, so that claims beside this one rarely
        -- spend the last before it locks). When there is, the same statement takes the
        -- shared lock: a try, so that it never waits inside a statement whose snapshot
        -- predates the lock
        SELECT CASE WHEN b.epoch IS NOT NULL AND b.concurrency = p_flow.concurrency
                         AND ((b.epoch = v_epoch AND v_left >= p_batch) OR b.granted + 2 * c_chunk <= b.cap)
                    THEN pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue))
               END
          INTO v_locked
          FROM drainpipe.flow_budget b WHERE b.queue = p_flow.queue;
        IF v_locked IS NULL THEN
            RETURN NULL;  -- no budget: the caller counts under the exclusive lock
        ELSIF NOT v_locked THEN
            -- a count holds the exclusive lock (or waits for it): after it
            PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
        END IF;
        v_kept := set_config('drainpipe.flow_budget_locked.' || p_flow.queue, 'on', true);
    END IF;
    -- under the lock, in statements that start after it: the epoch cannot change before
    -- this claim commits. The sequence first: a row stamped with it had no change pending
    v_sequence := drainpipe.flow_budget_sequence(p_flow.queue);
    IF v_sequence IS NOT NULL THEN
        v_now_at := pg_sequence_last_value(v_sequence);
    END IF;
    IF v_left >= p_batch THEN
        SELECT b.epoch, b.stamp INTO v_open, v_stamp FROM drainpipe.flow_budget b
         WHERE b.queue = p_flow.queue AND b.concurrency = p_flow.concurrency;
        v_seen := CASE WHEN v_stamp = v_now_at THEN v_now_at || ':' || v_sequence::oid ELSE ':' END;
        IF v_open = v_epoch THEN
            v_kept := set_config(v_name, v_epoch || ':' || (v_left - p_batch) || ':' || v_seen, false);
            RETURN p_batch;
        END IF;
    END IF;
    -- a chunk of the open epoch (the update reads the row as the last claim committed it)
    UPDATE drainpipe.flow_budget b SET granted = b.granted + c_chunk
     WHERE b.queue = p_flow.queue AND b.epoch IS NOT NULL
       AND b.concurrency = p_flow.concurrency AND b.granted + c_chunk <= b.cap
    RETURNING b.epoch, b.stamp INTO v_open, v_stamp;
    IF FOUND THEN
        IF v_open IS DISTINCT FROM v_epoch THEN
            v_left := 0;  -- what the session kept belongs to a closed epoch: never spent
        END IF;
        -- a chunk is at least 200, a budgeted batch at most 100
        v_seen := CASE WHEN v_stamp = v_now_at THEN v_now_at || ':' || v_sequence::oid ELSE ':' END;
        v_kept := set_config(v_name, v_open || ':' || (v_left + c_chunk - p_batch) || ':' || v_seen, false);
        RETURN p_batch;
    END IF;
    -- spent (or closed) since the first look: close it, waiting for the claims doing the
    -- same (on the row); what it handed out counts as leased (see jobs 0022's header)
    UPDATE drainpipe.flow_budget b SET epoch = NULL WHERE b.queue = p_flow.queue
    RETURNING b.granted INTO v_left;
    v_kept := set_config(v_name, '', false);
    v_kept := set_config('drainpipe.flow_budget_pending.' || p_flow.queue, coalesce(v_left, -1)::text, true);
    RETURN -1;
END
$$;

-- jobs 0022's, the epoch's identity taken from the queue's sequence, advanced first, and
-- the row stamped with it.
CREATE OR REPLACE FUNCTION drainpipe.flow_budget_reset(
    p_flow drainpipe.queue_flow, p_leased bigint, p_room integer
)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    c_chunk constant bigint := drainpipe.flow_budget_chunk(p_flow.concurrency);
    v_cap bigint := p_flow.concurrency - p_leased;
    v_stamp bigint;
BEGIN
    IF NOT drainpipe.flow_budget_applies(p_flow) THEN
        -- other limits: no epoch is open (the change of limits closed it), nothing to do
        RETURN;
    END IF;
    -- this session's own leftover was counted as nothing: forget it
    PERFORM set_config('drainpipe.flow_budget.' || p_flow.queue, '', false);
    IF v_cap - p_room >= 16 * c_chunk THEN
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        INSERT INTO drainpipe.flow_budget AS b (queue, epoch, concurrency, cap, granted, stamp)
        VALUES (p_flow.queue, coalesce(v_stamp, pg_current_xact_id()::text::bigint), p_flow.concurrency,
                v_cap, p_room, v_stamp)
        ON CONFLICT (queue) DO UPDATE
           SET epoch = excluded.epoch, concurrency = excluded.concurrency,
               cap = excluded.cap, granted = excluded.granted, stamp = excluded.stamp;
    ELSIF EXISTS (SELECT 1 FROM drainpipe.flow_budget b
                   WHERE b.queue = p_flow.queue AND (b.epoch IS NOT NULL OR b.granted <> 0)) THEN
        v_stamp := drainpipe.flow_budget_advance(p_flow.queue);
        UPDATE drainpipe.flow_budget b SET epoch = NULL, granted = 0, stamp = v_stamp
         WHERE b.queue = p_flow.queue;
    END IF;
END
$$;

-- jobs 0022's, creating the queue's budget sequence and advancing it before the epoch is
-- closed (see the header).
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(
    p_queue text, p_concurrency integer, p_key_concurrency integer,
    p_rate_count integer, p_rate_per double precision,
    p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_stamp bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- jobs 0023: a sequence per queue with a concurrency (a queue limited earlier gets its own)
    IF p_concurrency IS NOT NULL AND drainpipe.flow_budget_sequence(p_queue) IS NULL THEN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS drainpipe.%I', 'flow_budget__' || p_queue);
    END IF;
    -- jobs 0022: granted stays (chunks in flight still count until an exact count); the
    -- sequence advanced first, whether an epoch is open or not (a chunk kept from one that
    -- a spent budget closed is not spent under other limits)
    v_stamp := drainpipe.flow_budget_advance(p_queue);
    UPDATE drainpipe.flow_budget b SET epoch = NULL, stamp = v_stamp WHERE b.queue = p_queue;
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
DECLARE
    v_stamp bigint;
BEGIN
    DELETE FROM drainpipe.queue_pending WHERE queue = p_queue;
    -- jobs 0022, the sequence advanced first (jobs 0023)
    v_stamp := drainpipe.flow_budget_advance(p_queue);
    UPDATE drainpipe.flow_budget SET epoch = NULL, stamp = v_stamp WHERE queue = p_queue;
    DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;  -- jobs 0015
    DELETE FROM drainpipe.queue_policies WHERE queue = p_queue;
    RETURN FOUND;
END
$$;

-- Queues limited before this version: their budget sequences (their open epochs have no
-- stamp, so their sessions check the row until the next exact count opens one).
DO $sequences$
DECLARE
    v_queue text;
BEGIN
    FOR v_queue IN SELECT f.queue FROM drainpipe.queue_flow f WHERE f.concurrency IS NOT NULL LOOP
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS drainpipe.%I', 'flow_budget__' || v_queue);
    END LOOP;
END
$sequences$;
