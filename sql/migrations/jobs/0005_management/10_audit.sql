-- The Job Inbox's writes (docs/reference.md §10): every authorized cancel or replay that reaches its
-- job is audited by the same statement that changes it, refusals included, so an audit row
-- exists exactly when the change (or the refusal) happened and commits or rolls back with it.

CREATE TABLE IF NOT EXISTS drainpipe.management_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL,
    -- the deployment the management app serves ("production"): one database may serve several
    target text NOT NULL CHECK (length(target) BETWEEN 1 AND 200),
    actor text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action text NOT NULL CHECK (action IN ('cancel', 'replay')),
    queue text NOT NULL,
    job_id bigint NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('ok', 'refused')),
    -- why a write was refused (JOB_NOT_CANCELLABLE, JOB_NOT_DEAD, JOB_ALREADY_REPLAYED)
    code text CHECK (code ~ '^[A-Z][A-Z0-9_]{0,63}$'),
    idempotency_key text CHECK (length(idempotency_key) <= 255),
    new_job_id bigint
);

-- /audit pages newest first within one target: an index-only walk down (target, id)
CREATE INDEX IF NOT EXISTS management_audit_target_id
    ON drainpipe.management_audit (target, id DESC);

-- Cancel `p_id` of `p_queue` and audit it. Returns 'ok' (now cancelled), 'refused' (it was
-- terminal already; audited with JOB_NOT_CANCELLABLE), or NULL when the job is unknown or
-- purged (nothing was reached, nothing is audited: the caller answers 404).
CREATE OR REPLACE FUNCTION drainpipe.audited_cancel_job_v1(
    p_target text, p_actor text, p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_result text;
    v_outcome text;
BEGIN
    v_result := drainpipe.cancel_job_v1(p_queue, p_id, p_now);
    IF v_result IS NULL THEN
        RETURN NULL;
    END IF;
    v_outcome := CASE WHEN v_result = 'cancelled' THEN 'ok' ELSE 'refused' END;
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, job_id, outcome, code)
    VALUES (
        coalesce(p_now, clock_timestamp()), p_target, p_actor, 'cancel', p_queue, p_id,
        v_outcome, CASE WHEN v_outcome = 'refused' THEN 'JOB_NOT_CANCELLABLE' END
    );
    RETURN v_outcome;
END
$$;

-- Replay dead job `p_id` of `p_queue` (a new job, parent_id = p_id) and audit it.
-- One row: outcome 'ok' with the new id, or 'refused' with JOB_NOT_DEAD /
-- JOB_ALREADY_REPLAYED (audited too); no row when the job is unknown or purged.
CREATE OR REPLACE FUNCTION drainpipe.audited_replay_job_v1(
    p_target text,
    p_actor text,
    p_queue text,
    p_id bigint,
    p_idempotency_key text,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (outcome text, code text, new_job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint;
    v_state text;
    v_replayed_by bigint;
    v_code text;
BEGIN
    v_new := drainpipe.replay_dead_job_v2(p_queue, p_id, p_now);
    IF v_new IS NULL THEN
        -- why not: read after the replay attempt, so a concurrent replay that won the race
        -- reads as JOB_ALREADY_REPLAYED, never as "dead and replayable"
        SELECT j.state, j.replayed_by INTO v_state, v_replayed_by
        FROM drainpipe.get_job_v1(p_queue, p_id, p_now) AS j;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_code := CASE WHEN v_replayed_by IS NOT NULL THEN 'JOB_ALREADY_REPLAYED'
                       ELSE 'JOB_NOT_DEAD' END;
    END IF;
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, job_id, outcome, code, idempotency_key, new_job_id)
    VALUES (
        coalesce(p_now, clock_timestamp()), p_target, p_actor, 'replay', p_queue, p_id,
        CASE WHEN v_new IS NULL THEN 'refused' ELSE 'ok' END, v_code, p_idempotency_key, v_new
    );
    outcome := CASE WHEN v_new IS NULL THEN 'refused' ELSE 'ok' END;
    code := v_code;
    new_job_id := v_new;
    RETURN NEXT;
END
$$;

-- One page of the audit log of `p_target`, newest first, strictly older than `p_before`.
CREATE OR REPLACE FUNCTION drainpipe.list_management_audit_v1(
    p_target text, p_limit integer, p_before bigint DEFAULT NULL
)
RETURNS SETOF drainpipe.management_audit
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.management_audit AS a
    WHERE a.target = p_target AND (p_before IS NULL OR a.id < p_before)
    ORDER BY a.id DESC
    LIMIT least(greatest(p_limit, 1), 501)  -- one more than a page: is there a next?
$$;
