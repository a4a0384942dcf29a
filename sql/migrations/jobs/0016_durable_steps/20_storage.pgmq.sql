-- jobs 0016 on pgmq: a suspended message keeps its read_ct (the fence) and carries
--   failed = suspended = read_ct  (so the claim does not count its run as a lapsed lease,
--                                  and a stale complete/fail/extend of that run is refused)
--   waiting_for                   (while it is not eligible yet: the record reads waiting)
-- with vt at the wake time. A claim makes it a new run (read_ct + 1).

-- The message while p_attempt holds it, locked for the rest of the transaction: its
-- enqueue time, or NULL when the attempt does not hold it (any more).
CREATE OR REPLACE FUNCTION drainpipe.hold_job_fence(p_queue text, p_id bigint, p_attempt integer)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_enqueued timestamptz;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT enqueued_at FROM pgmq.%I WHERE msg_id = $1 AND read_ct = $2
                       AND message ->> ''failed'' IS DISTINCT FROM read_ct::text FOR UPDATE',
                   'q_' || p_queue)
      INTO v_enqueued USING p_id, p_attempt;
    RETURN v_enqueued;
END
$$;

-- Ends the held run without an attempt: eligible again at p_until, waiting for
-- p_waiting_for (NULL: nothing, it reads queued). Called after hold_job_fence.
CREATE OR REPLACE FUNCTION drainpipe.park_job(p_queue text, p_id bigint, p_until timestamptz, p_waiting_for text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format(
        'UPDATE pgmq.%I SET vt = $2,
                message = (message - ''waiting_for'')
                          || jsonb_build_object(''failed'', read_ct, ''suspended'', read_ct,
                                                ''max_attempts'', coalesce((message ->> ''max_attempts'')::integer, 5) + 1)
                          || CASE WHEN $3 IS NULL THEN ''{}''::jsonb ELSE jsonb_build_object(''waiting_for'', $3) END
          WHERE msg_id = $1', 'q_' || p_queue)
      USING p_id, p_until, p_waiting_for;
END
$$;

-- A suspended job made eligible now (an event it waits for arrived); false when it is not
-- suspended (running, finished, or eligible already).
CREATE OR REPLACE FUNCTION drainpipe.wake_job(p_queue text, p_id bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_woken integer;
BEGIN
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('UPDATE pgmq.%I SET vt = least(vt, $2), message = message - ''waiting_for''
                     WHERE msg_id = $1 AND message ->> ''suspended'' = read_ct::text
                       AND message ? ''waiting_for''', 'q_' || p_queue)
      USING p_id, p_now;
    GET DIAGNOSTICS v_woken = ROW_COUNT;
    RETURN v_woken > 0;
END
$$;

-- The stored state of a live message (jobs 0004), with suspended runs: waiting while it
-- waits for something, queued once eligible again.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_live_state(p_read_ct integer, p_message jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_read_ct = 0 THEN 'queued'
                WHEN p_message ->> 'suspended' = p_read_ct::text
                     THEN CASE WHEN p_message ? 'waiting_for' THEN 'waiting' ELSE 'queued' END
                WHEN p_message ->> 'failed' = p_read_ct::text THEN 'retry_wait'
                ELSE 'leased' END
$$;

-- Children (job.spawn): the parent's id in each child's document, as replays carry theirs.
CREATE OR REPLACE FUNCTION drainpipe.set_job_parent(p_queue text, p_ids bigint[], p_parent bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('UPDATE pgmq.%I SET message = message || jsonb_build_object(''parent_id'', $2)
                     WHERE msg_id = ANY ($1)', 'q_' || p_queue)
      USING p_ids, p_parent;
END
$$;

-- Where each child is: 'live' (in the queue), its terminal state (in the archive), or
-- 'purged'; and why a finished one ended (a success: its skip code).
CREATE OR REPLACE FUNCTION drainpipe.child_job_states(p_queue text, p_ids bigint[])
RETURNS TABLE (id bigint, state text, last_code text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN QUERY SELECT i.id, 'purged'::text, NULL::text FROM unnest(p_ids) AS i(id);
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT i.id,
                CASE WHEN q.msg_id IS NOT NULL THEN ''live''
                     WHEN a.msg_id IS NULL THEN ''purged''
                     WHEN a.message ? ''cancelled'' THEN ''cancelled''
                     WHEN a.message ? ''dead'' THEN ''dead''
                     ELSE ''succeeded'' END,
                CASE WHEN q.msg_id IS NOT NULL OR a.msg_id IS NULL THEN NULL
                     WHEN a.message ? ''cancelled'' OR a.message ? ''dead'' THEN a.message ->> ''last_code''
                     ELSE a.message ->> ''skipped'' END
           FROM unnest($1) WITH ORDINALITY AS i(id, n)
           LEFT JOIN pgmq.%I q ON q.msg_id = i.id
           LEFT JOIN pgmq.%I a ON a.msg_id = i.id
          ORDER BY i.n', 'q_' || p_queue, 'a_' || p_queue)
      USING p_ids;
END
$$;
