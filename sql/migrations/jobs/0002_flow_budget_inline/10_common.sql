-- jobs 0002: a concurrency far from binding spends the connection's chunk inside the claim
-- that calls flow_budget_spend (an SQL expression the claim inlines: no function call, one
-- set_config), and flow_budget_take finds the shared lock such a claim took without a mark.

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_held(p_queue text)
 RETURNS boolean LANGUAGE sql STABLE AS $function$
    -- does this transaction hold the queue's flow lock shared? (flow_budget_take marks it;
    -- flow_budget_spend does not, so a connection with a chunk asks the lock table: a claim
    -- holding it must not wait for the exclusive lock beside another that does the same)
    SELECT coalesce(current_setting('drainpipe.flow_budget_locked.' || p_queue, true) = 'on', false)
        OR (coalesce(current_setting('drainpipe.flow_budget.' || p_queue, true) <> '', false) AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.mode = 'ShareLock'
               AND l.classid = (hashtext('drainpipe.flow')::bigint & 4294967295)::oid
               AND l.objid = (hashtext(p_queue)::bigint & 4294967295)::oid AND l.objsubid = 2)) $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_spend(p_queue text, p_batch integer)
 RETURNS integer LANGUAGE sql AS $function$
    -- The connection's chunk ('epoch:left:seen:sequence', see flow_budget_take) spent by one
    -- expression, which the planner inlines into the claim's: p_batch, or NULL (the claim
    -- asks flow_budget_take) unless a batch of at most 100 fits in it and the queue's
    -- sequence still reads what the connection saw, before the shared lock (a change sends
    -- the claim to the row, free to count under the exclusive lock) and under it (no count
    -- runs until the claim commits). Keep it one SELECT of one expression: a FROM, a
    -- subquery, SECURITY DEFINER or a SET clause would make it a call again.
    SELECT CASE WHEN p_batch <= 100
                 AND split_part(current_setting('drainpipe.flow_budget.' || p_queue, true), ':', 3) <> ''
           THEN CASE WHEN split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 2)::bigint >= p_batch
                      AND pg_sequence_last_value(split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 4)::oid)
                          = split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 3)::bigint
                      AND pg_try_advisory_xact_lock_shared(hashtext('drainpipe.flow'), hashtext(p_queue))
                      AND pg_sequence_last_value(split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 4)::oid)
                          = split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 3)::bigint
                      AND set_config('drainpipe.flow_budget.' || p_queue,
                              split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 1) || ':'
                              || (split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 2)::bigint - p_batch)
                              || ':' || split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 3)
                              || ':' || split_part(current_setting('drainpipe.flow_budget.' || p_queue), ':', 4),
                              false) <> ''
                THEN p_batch END
           END $function$;

CREATE OR REPLACE FUNCTION drainpipe.flow_budget_take(p_flow drainpipe.queue_flow, p_batch integer)
 RETURNS integer LANGUAGE plpgsql AS $function$
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
        IF v_locked OR drainpipe.flow_budget_held(p_flow.queue) THEN
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
            IF NOT drainpipe.flow_budget_held(p_flow.queue) THEN
                RETURN NULL;  -- no budget: the caller counts under the exclusive lock
            END IF;
            -- a claim of this transaction spent a chunk under the shared lock: on from here
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
END $function$;
