-- jobs: replay rules (docs/reference.md, "Replay rules"; docs/policies.md#replaying-safely).
-- A queue policy may bound how old a job's source event may be when it is replayed
-- (replay_window, seconds, counted from when the first job of its replay lineage was
-- enqueued) and may refuse replays altogether (replayable = false). The storages' replay
-- function (replay_dead_job_v3, 20_storage) applies them under a share lock on the policy
-- row, so a policy change and a replay are ordered: a replay either commits before the
-- change or sees it. Refusals are codes (EVENT_EXPIRED, REPLAY_BLOCKED) in the rows of
-- replay_dead_job_v3 / retry_dead_jobs_v2 / audited_replay_job_v2, and SQLSTATEs DPR01 /
-- DPR02 from replay_dead_job_v2, which only returns an id.

ALTER TABLE drainpipe.queue_policies
    ADD COLUMN IF NOT EXISTS replay_window double precision CHECK (replay_window > 0);
ALTER TABLE drainpipe.queue_policies
    ADD COLUMN IF NOT EXISTS replayable boolean NOT NULL DEFAULT true;

-- ensure_queue_policy_v1 plus the replay rules. v1 stays for the previous release: it
-- leaves the rules as they are, so an old instance re-storing its policies at deploy
-- does not lift a rule the new release stored.
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v2(
    p_queue text, p_max_payload_bytes integer, p_max_pending integer,
    p_lease double precision, p_max_lease double precision, p_max_delay double precision,
    p_max_attempts integer, p_attempt_window double precision, p_retention double precision,
    p_encrypt boolean, p_replay_window double precision DEFAULT NULL,
    p_replayable boolean DEFAULT true
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- before the policy row: a replay in flight holds this lock shared (see
    -- replay_rules_in_force), so a queue's first policy, which has no row a replay could
    -- have locked yet, is ordered with replays too
    PERFORM pg_advisory_xact_lock(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    PERFORM drainpipe.ensure_queue_policy_v1(p_queue, p_max_payload_bytes, p_max_pending,
        p_lease, p_max_lease, p_max_delay, p_max_attempts, p_attempt_window, p_retention,
        p_encrypt);
    UPDATE drainpipe.queue_policies
       SET replay_window = p_replay_window, replayable = coalesce(p_replayable, true)
     WHERE queue = p_queue;
END
$$;

-- The replay rules of p_queue in force for this transaction: the stored policy's (its row
-- share-locked until the transaction ends, so a concurrent policy change waits for this
-- replay, or this replay waits for it and reads the new rules) combined with the caller's
-- declared ones, the stricter of each winning. A queue without a policy row yet has no row
-- to lock: the shared advisory lock orders the replay with ensure_queue_policy_v2, which
-- takes it exclusively before it inserts the row. Call this before touching any job row: a
-- policy change locks the queue's table after its policy row, never the other way round.
CREATE OR REPLACE FUNCTION drainpipe.replay_rules_in_force(
    p_queue text, p_window double precision, p_replayable boolean,
    OUT replay_window double precision, OUT replayable boolean
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_window double precision;
    v_replayable boolean;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('drainpipe.queue_policies'), hashtext(p_queue));
    SELECT p.replay_window, p.replayable INTO v_window, v_replayable
      FROM drainpipe.queue_policies AS p WHERE p.queue = p_queue FOR SHARE;
    replayable := coalesce(v_replayable, true) AND coalesce(p_replayable, true);
    replay_window := CASE WHEN v_window IS NULL THEN p_window
                          WHEN p_window IS NULL THEN v_window
                          ELSE least(v_window, p_window) END;
END
$$;

-- Why a dead job may not be replayed under these rules: REPLAY_BLOCKED, EVENT_EXPIRED
-- (its lineage's first job was enqueued at p_origin, longer than the window before p_now),
-- or NULL.
CREATE OR REPLACE FUNCTION drainpipe.replay_refusal(
    p_replay_window double precision, p_replayable boolean, p_origin timestamptz,
    p_now timestamptz
)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN NOT coalesce(p_replayable, true) THEN 'REPLAY_BLOCKED'
        WHEN p_replay_window IS NOT NULL AND p_origin IS NOT NULL
             AND p_origin < p_now - make_interval(secs => p_replay_window) THEN 'EVENT_EXPIRED'
    END
$$;

-- replay_dead_job_v2 (the previous release's and PostgREST's replay_v2 call it) now obeys
-- the stored rules: a refusal raises DPR01 (EVENT_EXPIRED) or DPR02 (REPLAY_BLOCKED);
-- otherwise the new id, or NULL unless a dead job not replayed yet, as before.
CREATE OR REPLACE FUNCTION drainpipe.replay_dead_job_v2(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_new bigint;
    v_code text;
BEGIN
    SELECT r.new_job_id, r.code INTO v_new, v_code
      FROM drainpipe.replay_dead_job_v3(p_queue, p_id, NULL, true, p_now) AS r;
    IF v_code = 'EVENT_EXPIRED' THEN
        RAISE EXCEPTION 'job % of queue "%" is past its replay_window: its event is too old to replay',
            p_id, p_queue USING ERRCODE = 'DPR01';
    ELSIF v_code = 'REPLAY_BLOCKED' THEN
        RAISE EXCEPTION 'queue "%" does not allow replays (replayable = false)', p_queue
            USING ERRCODE = 'DPR02';
    END IF;
    RETURN v_new;
END
$$;

-- Replays dead jobs one by one, each under the rules: the given ids (newest first, at most
-- p_batch of them) or the newest p_batch dead jobs not replayed yet. One row per job tried:
-- its new id, or NULL and why not (replay_dead_job_v3's codes).
CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs_v2(
    p_queue text, p_ids bigint[] DEFAULT NULL, p_batch integer DEFAULT 1000,
    p_window double precision DEFAULT NULL, p_replayable boolean DEFAULT true,
    p_now timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, new_job_id bigint, code text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ids bigint[];
    v_id bigint;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_ids IS NULL THEN
        v_ids := ARRAY(SELECT drainpipe.dead_job_ids(p_queue, NULL, p_batch));
    ELSE
        v_ids := ARRAY(SELECT DISTINCT i FROM unnest(p_ids) AS i WHERE i IS NOT NULL
                        ORDER BY i DESC LIMIT greatest(coalesce(p_batch, 1000), 1));
    END IF;
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT r.new_job_id, r.code INTO new_job_id, code
          FROM drainpipe.replay_dead_job_v3(p_queue, v_id, p_window, p_replayable, p_now) AS r;
        job_id := v_id;
        RETURN NEXT;
    END LOOP;
END
$$;

-- The previous release's retry_dead: refused and lost-race jobs are skipped, not counted.
CREATE OR REPLACE FUNCTION drainpipe.retry_dead_jobs_v1(
    p_queue text, p_ids bigint[] DEFAULT NULL, p_batch integer DEFAULT 1000
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*)::integer FROM drainpipe.retry_dead_jobs_v2(p_queue, p_ids, p_batch) AS r
     WHERE r.new_job_id IS NOT NULL AND r.code IS NULL
$$;
