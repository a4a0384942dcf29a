-- jobs, pgmq storage: replay under the replay rules (10_replay_rules.sql).

-- When the source event of p_id entered the queue: the enqueue time of the first job of
-- its replay lineage (a replay of a replay does not restart the window). A replayed parent
-- is always a dead letter in the archive, so the walk reads the archive; a purged ancestor
-- ends it at the oldest job still kept.
CREATE OR REPLACE FUNCTION drainpipe.replay_origin(p_queue text, p_id bigint)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_origin timestamptz;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format(
        'WITH RECURSIVE lineage (id, parent_id, enqueued_at, depth) AS (
             SELECT a.msg_id, (a.message ->> ''parent_id'')::bigint, a.enqueued_at, 1
               FROM pgmq.%1$I AS a WHERE a.msg_id = $1
             UNION ALL
             SELECT a.msg_id, (a.message ->> ''parent_id'')::bigint, a.enqueued_at, l.depth + 1
               FROM lineage AS l JOIN pgmq.%1$I AS a ON a.msg_id = l.parent_id AND a.msg_id < l.id
              WHERE l.depth < 1000
         )
         SELECT min(enqueued_at) FROM lineage', 'a_' || p_queue)
      INTO v_origin USING p_id;
    RETURN v_origin;
END
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
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_message jsonb;
    v_read_ct integer;
    v_vt timestamptz;
    v_new bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    -- the policy row first (see replay_rules_in_force), then the job
    v_rules := drainpipe.replay_rules_in_force(p_queue, p_window, p_replayable);
    IF to_regclass('pgmq.a_' || p_queue) IS NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    END IF;
    -- a last lease that ran out is a dead job already, not swept yet: sweep it now
    EXECUTE format('SELECT read_ct, message, vt FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE', 'q_' || p_queue)
      INTO v_read_ct, v_message, v_vt USING p_id;
    IF v_read_ct IS NOT NULL THEN
        IF drainpipe.job_state_at(drainpipe.pgmq_live_state(v_read_ct, v_message), v_vt, v_read_ct,
                                  coalesce((v_message ->> 'max_attempts')::integer, 5), v_now) <> 'dead' THEN
            RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_DEAD'::text;
            RETURN;
        END IF;
        INSERT INTO drainpipe.job_attempts (queue, job_id, number, started_at, ended_at, outcome, code)
        VALUES (p_queue, p_id, v_read_ct, NULL, v_vt, 'expired', 'LEASE_EXPIRED')
        ON CONFLICT DO NOTHING;
        PERFORM drainpipe.pgmq_archive_job(p_queue, p_id,
            '{"last_error": "The lease ran out on the last attempt", "dead": true, "last_code": "MAX_ATTEMPTS"}', v_vt);
    END IF;
    v_message := NULL;
    EXECUTE format('SELECT message FROM pgmq.%I WHERE msg_id = $1 FOR UPDATE', 'a_' || p_queue)
      INTO v_message USING p_id;
    IF v_message IS NULL THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_NOT_FOUND'::text;
        RETURN;
    ELSIF v_message ? 'replayed_by' THEN
        RETURN QUERY SELECT NULL::bigint, 'JOB_ALREADY_REPLAYED'::text;
        RETURN;
    ELSIF NOT v_message ? 'dead' THEN
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
    v_new := drainpipe.enqueue_job_v1(p_queue, v_message -> 'payload', 0,
        coalesce((v_message ->> 'max_attempts')::integer, 5), v_message ->> 'dedupe_key', true);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1 AND NOT message ? ''parent_id''',
                   'q_' || p_queue)
      USING v_new, jsonb_build_object('parent_id', p_id);
    EXECUTE format('UPDATE pgmq.%I SET message = message || $2 WHERE msg_id = $1', 'a_' || p_queue)
      USING p_id, jsonb_build_object('replayed_by', v_new);
    RETURN QUERY SELECT v_new, NULL::text;
END
$$;
