-- jobs 0017: claims order by priority (docs/flow-control.md#priorities): higher first, then
-- earliest eligible, then id, within a queue and within what its limits allow.
--
-- A queue whose jobs all have priority 0 keeps its claim as it was: a queue gets a row of
-- queue_priorities with the first enqueue of a job with a non-zero priority, and only then
-- does its claim take the priority path, with an index of its own (built then, on the
-- storage's side: see 20_storage.*.sql). The row lists the priorities its jobs were ever
-- given (and 0): the claim looks at those levels, highest first, one index range each, so
-- a claim costs one probe per level it passes, whatever the backlog. The row stays: a
-- queue once prioritised keeps the priority path.

CREATE TABLE IF NOT EXISTS drainpipe.queue_priorities (
    queue text PRIMARY KEY,
    -- every priority a job of the queue was enqueued with, and 0, highest first
    levels integer[] NOT NULL
);
ALTER TABLE drainpipe.queue_priorities ENABLE ROW LEVEL SECURITY;

-- Called by the enqueues with a stored value that names a priority: a level not seen
-- before on p_queue is added to its row (the first one builds what the storage's priority
-- claim reads: ensure_priority_claim). In the enqueue's transaction, so a claim sees the
-- level no later than the job.
CREATE OR REPLACE FUNCTION drainpipe.note_job_priority(p_queue text, p_level integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_level IS NULL OR EXISTS (SELECT 1 FROM drainpipe.queue_priorities p
                                   WHERE p.queue = p_queue AND p_level = ANY (p.levels)) THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM drainpipe.queue_priorities p WHERE p.queue = p_queue) THEN
        PERFORM drainpipe.ensure_priority_claim(p_queue);
    END IF;
    INSERT INTO drainpipe.queue_priorities AS p (queue, levels)
    VALUES (p_queue, ARRAY(SELECT DISTINCT l FROM unnest(ARRAY[0, p_level]) l ORDER BY l DESC))
    ON CONFLICT (queue) DO UPDATE
       SET levels = ARRAY(SELECT DISTINCT l FROM unnest(p.levels || excluded.levels) l
                           ORDER BY l DESC);
END
$$;

-- The levels of the stored values p_stored (a JSON array) that name a non-zero priority,
-- noted on p_queue (enqueue_jobs_v1). Cheap when none does: one key test per value.
CREATE OR REPLACE FUNCTION drainpipe.note_job_priorities(p_queue text, p_stored jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_level integer;
BEGIN
    FOR v_level IN
        SELECT DISTINCT drainpipe.job_priority(e.value)
          FROM jsonb_array_elements(p_stored) e
         WHERE jsonb_typeof(e.value) = 'object' AND e.value ? 'priority'
    LOOP
        IF v_level <> 0 THEN
            PERFORM drainpipe.note_job_priority(p_queue, v_level);
        END IF;
    END LOOP;
END
$$;

-- The name a claim's bound (jobs 0014, claim_bound) goes by for one priority level of a
-- queue: each level is an index range of its own, with its own oldest end.
CREATE OR REPLACE FUNCTION drainpipe.priority_bound_name(p_queue text, p_level integer)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_queue || CASE WHEN p_level < 0 THEN '__pm' ELSE '__p' END || abs(p_level)::text
$$;

-- A concurrency that does not bind (jobs 0015's flow_gate): its claims first counted what is
-- leased only to choose between the shared gate and the exclusive one, and counted again
-- under the gate. That first count reads every entry of the leased index in the lease
-- window, the dead ones of completed jobs too: about half of what such a claim cost. The
-- count taken under the gate is kept per session and queue, and while it leaves the limit
-- far from binding (twice the shared gate's margin) the next claim of the session skips the
-- first count and asks for the shared gate. Safe whatever the hint says: the room is always
-- what the count under the gate leaves, less what the claims beside it may add; a stale
-- hint can only make one claim take less than it might have (the next one counts first).
CREATE OR REPLACE FUNCTION drainpipe.flow_leased_hint(p_flow drainpipe.queue_flow)
RETURNS bigint
LANGUAGE plpgsql  -- under its callers' settings, as flow_room
AS $$
DECLARE
    v_kept bigint := nullif(current_setting('drainpipe.flow_leased.' || p_flow.queue, true), '')::bigint;
BEGIN
    IF v_kept IS NOT NULL AND p_flow.rate_count IS NULL AND p_flow.key_concurrency IS NULL
       AND p_flow.key_rate_count IS NULL AND NOT p_flow.ordered
       AND v_kept + 4 * 8 * 100 <= p_flow.concurrency THEN
        RETURN v_kept;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.keep_flow_leased(p_queue text, p_leased bigint)
RETURNS void
LANGUAGE sql
AS $$
    SELECT set_config('drainpipe.flow_leased.' || p_queue, p_leased::text, false)
$$;
