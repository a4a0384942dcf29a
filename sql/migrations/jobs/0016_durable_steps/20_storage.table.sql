-- jobs 0016 on the table: a suspended row keeps its attempts (the fence) with state
-- 'waiting' (waits for something) or 'queued' (eligible at once), visible_at at the wake
-- time. The claim takes either as a new run (attempts + 1); neither reads as a lapsed lease.

-- The row while p_attempt holds it, locked for the rest of the transaction: its enqueue
-- time, or NULL when the attempt does not hold it (any more).
CREATE OR REPLACE FUNCTION drainpipe.hold_job_fence(p_queue text, p_id bigint, p_attempt integer)
RETURNS timestamptz
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.enqueued_at FROM drainpipe.job_messages m
     WHERE m.id = p_id AND m.queue = p_queue AND m.attempts = p_attempt
       AND m.state = 'leased' AND m.finished_at IS NULL
       FOR UPDATE
$$;

-- Ends the held run without an attempt (see the pgmq variant).
CREATE OR REPLACE FUNCTION drainpipe.park_job(p_queue text, p_id bigint, p_until timestamptz, p_waiting_for text)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE drainpipe.job_messages
       SET state = CASE WHEN p_waiting_for IS NULL THEN 'queued' ELSE 'waiting' END,
           visible_at = p_until,
           max_attempts = max_attempts + 1
     WHERE id = p_id AND queue = p_queue
$$;

CREATE OR REPLACE FUNCTION drainpipe.wake_job(p_queue text, p_id bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE drainpipe.job_messages
       SET state = 'queued', visible_at = least(visible_at, p_now)
     WHERE id = p_id AND queue = p_queue AND state = 'waiting' AND finished_at IS NULL;
    RETURN FOUND;
END
$$;

-- Children (job.spawn): the parent's id on each child's row.
CREATE OR REPLACE FUNCTION drainpipe.set_job_parent(p_queue text, p_ids bigint[], p_parent bigint)
RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE drainpipe.job_messages SET parent_id = p_parent WHERE id = ANY (p_ids) AND queue = p_queue
$$;

-- Where each child is: 'live', its terminal state, or 'purged'; why a finished one ended.
CREATE OR REPLACE FUNCTION drainpipe.child_job_states(p_queue text, p_ids bigint[])
RETURNS TABLE (id bigint, state text, last_code text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.id,
           CASE WHEN m.id IS NULL THEN 'purged' WHEN m.finished_at IS NULL THEN 'live' ELSE m.state END,
           CASE WHEN m.finished_at IS NOT NULL THEN m.last_code END
      FROM unnest(p_ids) WITH ORDINALITY AS i(id, n)
      LEFT JOIN drainpipe.job_messages m ON m.id = i.id AND m.queue = p_queue
     ORDER BY i.n
$$;
