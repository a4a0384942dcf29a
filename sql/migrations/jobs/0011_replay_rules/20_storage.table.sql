-- jobs, table storage: replay under the replay rules (10_replay_rules.sql).

-- When the source event of p_id entered the queue: the enqueue time of the first job of
-- its replay lineage (a replay of a replay does not restart the window). Walks parent_id
-- down (a parent's id is always lower); a purged ancestor ends the walk at the oldest
-- job still kept.
CREATE OR REPLACE FUNCTION drainpipe.replay_origin(p_queue text, p_id bigint)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE lineage (id, parent_id, enqueued_at, depth) AS (
        SELECT m.id, m.parent_id, m.enqueued_at, 1
          FROM drainpipe.job_messages AS m WHERE m.id = p_id AND m.queue = p_queue
        UNION ALL
        SELECT m.id, m.parent_id, m.enqueued_at, l.depth + 1
          FROM lineage AS l JOIN drainpipe.job_messages AS m
            ON m.id = l.parent_id AND m.queue = p_queue AND m.id < l.id
         WHERE l.depth < 1000
    )
    SELECT min(enqueued_at) FROM lineage
$$;

-- replay_dead_job_v2's replay (same payload, dedupe key, max_attempts; parent_id; the
-- parent gets replayed_by) under the rules: p_window / p_replayable are the caller's
-- declared rules, combined with the stored policy's (replay_rules_in_force). One row:
-- the new id and a NULL code, or a NULL id and why not: JOB_NOT_FOUND, JOB_ALREADY_REPLAYED,
-- JOB_NOT_DEAD, REPLAY_BLOCKED, EVENT_EXPIRED.
CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v3(
    p_queue text, p_id bigint, p_window double precision DEFAULT NULL,
    p_replayable boolean DEFAULT true, p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (new_job_id bigint, code text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rules record;
    v_job drainpipe.job_messages;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_new bigint;
BEGIN
    -- the policy row first (see replay_rules_in_force), then the job
    v_rules := drainpipe.replay_rules_in_force(p_queue, p_window, p_replayable);
    SELECT * INTO v_job FROM drainpipe.job_messages WHERE id = p_id AND queue = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    END IF;
    IF v_job.replayed_by IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_ALREADY_REPLAYED'::text;
        RETURN;
    END IF;
    IF v_job.state = 'leased' AND v_job.visible_at <= v_now AND v_job.attempts >= v_job.max_attempts THEN
        -- dead already, not swept yet
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_job.attempts, v_job.started_at, v_job.visible_at, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        UPDATE drainpipe.job_messages
           SET state = 'dead', finished_at = v_job.visible_at, last_code = 'MAX_ATTEMPTS',
               last_error = 'The lease ran out on the last attempt'
         WHERE id = p_id;
    ELSIF v_job.state <> 'dead' THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_DEAD'::text;
        RETURN;
    END IF;
    code := drainpipe.replay_refusal(v_rules.replay_window, v_rules.replayable,
        CASE WHEN v_rules.replay_window IS NULL THEN NULL
             ELSE drainpipe.replay_origin(p_queue, p_id) END, v_now);
    IF code IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, code;
        RETURN;
    END IF;
    IF v_job.dedupe_key IS NULL THEN
        INSERT INTO drainpipe.job_messages (queue, payload, max_attempts, visible_at, parent_id)
        VALUES (p_queue, v_job.payload, v_job.max_attempts, clock_timestamp(), p_id)
        RETURNING id INTO v_new;
    ELSE
        v_new := drainpipe.enqueue_keyed_job(p_queue, v_job.payload, 0, v_job.max_attempts,
                                             v_job.dedupe_key, true, p_id);
    END IF;
    UPDATE drainpipe.job_messages SET replayed_by = v_new WHERE id = p_id;
    RETURN QUERY SELECT v_new, NULL::text;
END
$$;
