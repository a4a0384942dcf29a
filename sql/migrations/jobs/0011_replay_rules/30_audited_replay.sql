-- jobs: the Job Inbox's audited replay under the replay rules, and with the refusal of the
-- application's own check (Jobs(replay_check=...)) audited like any other refused write.

-- Replay dead job p_id of p_queue and audit it, in one statement. p_refusal: a code the
-- caller's check refused the replay with (audited as refused, nothing replayed); else the
-- replay runs under the rules (replay_dead_job_v3, p_window / p_replayable as there).
-- One row: outcome 'ok' with the new id, or 'refused' with its code (JOB_NOT_DEAD,
-- JOB_ALREADY_REPLAYED, REPLAY_BLOCKED, EVENT_EXPIRED, or p_refusal); no row, and no audit,
-- when the job is unknown or purged.
CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v2(
    p_target text,
    p_actor text,
    p_queue text,
    p_id bigint,
    p_idempotency_key text,
    p_refusal text DEFAULT NULL,
    p_window double precision DEFAULT NULL,
    p_replayable boolean DEFAULT true,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (outcome text, code text, new_job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint;
    v_code text;
BEGIN
    IF p_refusal IS NOT NULL THEN
        PERFORM 1 FROM drainpipe.get_job_v1(p_queue, p_id, p_now);
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_code := p_refusal;
    ELSE
        SELECT r.new_job_id, r.code INTO v_new, v_code
          FROM drainpipe.replay_dead_job_v3(p_queue, p_id, p_window, p_replayable, p_now) AS r;
        IF v_code = 'JOB_NOT_FOUND' THEN
            RETURN;
        END IF;
    END IF;
    outcome := CASE WHEN v_new IS NULL THEN 'refused' ELSE 'ok' END;
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, job_id, outcome, code, idempotency_key, new_job_id)
    VALUES (
        coalesce(p_now, clock_timestamp()), p_target, p_actor, 'replay', p_queue, p_id,
        outcome, v_code, p_idempotency_key, v_new
    );
    code := v_code;
    new_job_id := v_new;
    RETURN NEXT;
END
$$;

-- The previous release's audited replay: the same, under the stored rules (a rule's
-- refusal is audited and answered as refused with its code).
CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v1(
    p_target text,
    p_actor text,
    p_queue text,
    p_id bigint,
    p_idempotency_key text,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (outcome text, code text, new_job_id bigint)
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.outcome, r.code, r.new_job_id
      FROM drainpipe.audited_replay_job_v2(p_target, p_actor, p_queue, p_id, p_idempotency_key,
                                           NULL, NULL, true, p_now) AS r
$$;
