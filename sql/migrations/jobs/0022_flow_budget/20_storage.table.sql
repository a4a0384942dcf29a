-- The table: the queue-wide room of a limited claim from the queue's budget (10_flow_budget.sql).

-- jobs 0017's, the room taken from the queue's budget while the concurrency is far from
-- binding (no count), else counted under the queue's flow lock (flow_gate's shared lock
-- and the session's hint are no longer used here).
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
)
RETURNS integer
-- no SET clause and not a security definer: called only by the claim functions, whose
-- settings it runs under (a SET clause costs every call a save and restore)
LANGUAGE plpgsql
AS $$
DECLARE
    v_leased bigint := 0;
    v_room integer;
BEGIN
    v_room := drainpipe.flow_budget_take(p_flow, p_batch);
    IF v_room >= 0 THEN
        RETURN v_room;
    END IF;
    IF v_room IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    ELSIF drainpipe.flow_budget_pending(p_flow.queue) < 0 THEN
        RETURN 0;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_room(p_flow, p_batch, v_leased, p_now);
        IF p_flow.concurrency IS NOT NULL THEN
            PERFORM drainpipe.flow_budget_reset(p_flow, v_leased, v_room);
        END IF;
        RETURN v_room;
    END IF;
    -- the budget ran out under the shared lock: its chunks count as leased
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + drainpipe.flow_budget_pending(p_flow.queue), p_now);
END
$$;
