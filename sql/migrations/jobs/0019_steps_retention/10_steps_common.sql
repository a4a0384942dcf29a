-- jobs 0019: a job's steps and workflow go with its record, and records count attempts the
-- same way everywhere.

-- Records count attempts without the resumptions, wherever they are read (get, list_jobs,
-- the console's search, and through them PostgREST): a resumed run keeps its attempt
-- number (jobs 0016). The storage's record functions are kept as they are under internal
-- names, and the public ones hand their rows through counted_job_records, in their order.
-- Every suspension raised the stored max_attempts by one; every resumption claim moved the
-- fence by one (the latest suspension's resumption has not come while the fence is still
-- the one it suspended with).
CREATE OR REPLACE FUNCTION drainpipe.counted_job_records(p_records drainpipe.job_record_v1[])
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.id, r.queue, r.state,
           CASE WHEN w.suspensions > 0
                THEN greatest(0, r.attempts - (w.suspensions
                                               - CASE WHEN r.attempts = w.last_fence THEN 1 ELSE 0 END))
                ELSE r.attempts END,
           CASE WHEN w.suspensions > 0 THEN greatest(1, r.max_attempts - w.suspensions)
                ELSE r.max_attempts END,
           r.deadline, r.tenant, r.dedupe_key, r.enqueued_at, r.eligible_at, r.started_at,
           r.finished_at, r.last_code, r.parent_id, r.replayed_by, r.history
      FROM unnest(p_records) WITH ORDINALITY AS r
      LEFT JOIN drainpipe.job_workflows w ON w.queue = r.queue AND w.job_id = r.id
     ORDER BY r.ordinality
$$;

-- Re-runnable: a public function that is not the wrapper yet (a fresh install, or an
-- earlier migration run again redefined it) is renamed, replacing an older renamed copy;
-- one that is the wrapper already stays as it is.
DO $rename$
DECLARE
    v_pair text[];
    v_public regprocedure;
BEGIN
    FOREACH v_pair SLICE 1 IN ARRAY ARRAY[
        ['get_job_v1(text, bigint, timestamptz)', 'uncounted_get_job'],
        ['list_jobs_v1(text, text, text, integer, bigint, text, timestamptz)', 'uncounted_list_jobs_1'],
        ['list_jobs_v2(text, text, text, integer, timestamptz, bigint, text, timestamptz)',
         'uncounted_list_jobs_2'],
        ['search_jobs_v1(text, text, text, text, timestamptz, timestamptz, text, bigint, integer, bigint, text, timestamptz)',
         'uncounted_search_jobs']
    ] LOOP
        v_public := to_regprocedure('drainpipe.' || v_pair[1]);
        CONTINUE WHEN v_public IS NULL
               OR (SELECT p.prosrc LIKE '%' || v_pair[2] || '%' FROM pg_proc p WHERE p.oid = v_public);
        EXECUTE format('DROP FUNCTION IF EXISTS drainpipe.%s', v_pair[2] || substr(v_pair[1], strpos(v_pair[1], '(')));
        EXECUTE format('ALTER FUNCTION drainpipe.%s RENAME TO %I', v_pair[1], v_pair[2]);
    END LOOP;
END
$rename$;

CREATE OR REPLACE FUNCTION drainpipe.get_job_v1(p_queue text, p_id bigint, p_now timestamptz DEFAULT NULL)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_get_job(p_queue, p_id, p_now) r))
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v1(
    p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100, p_before_id bigint DEFAULT NULL, p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_list_jobs_1(p_queue, p_state, p_tenant, p_limit,
                                                      p_before_id, p_before_queue, p_now) r))
$$;

CREATE OR REPLACE FUNCTION drainpipe.list_jobs_v2(
    p_queue text DEFAULT NULL, p_state text DEFAULT NULL, p_tenant text DEFAULT NULL,
    p_limit integer DEFAULT 100, p_before_at timestamptz DEFAULT NULL,
    p_before_id bigint DEFAULT NULL, p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_list_jobs_2(p_queue, p_state, p_tenant, p_limit,
                                                      p_before_at, p_before_id, p_before_queue,
                                                      p_now) r))
$$;

CREATE OR REPLACE FUNCTION drainpipe.search_jobs_v1(
    p_queue text, p_state text, p_tenant text, p_code text, p_since timestamptz,
    p_until timestamptz, p_dedupe_key text, p_id bigint, p_limit integer,
    p_before_id bigint DEFAULT NULL, p_before_queue text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF drainpipe.job_record_v1
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM drainpipe.counted_job_records(ARRAY(
        SELECT r FROM drainpipe.uncounted_search_jobs(p_queue, p_state, p_tenant, p_code, p_since,
                                                      p_until, p_dedupe_key, p_id, p_limit,
                                                      p_before_id, p_before_queue, p_now) r))
$$;

-- Steps and workflow rows whose job record is gone (the storage's retention calls this
-- with the ids it deleted).
CREATE OR REPLACE FUNCTION drainpipe.forget_job_steps(p_queue text, p_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH steps_gone AS (
        DELETE FROM drainpipe.job_steps s WHERE s.queue = p_queue AND s.job_id = ANY (p_ids)
    )
    DELETE FROM drainpipe.job_workflows w WHERE w.queue = p_queue AND w.job_id = ANY (p_ids)
$$;
