-- The console's reads and audited writes (docs/job-inbox.md#the-console): the queue
-- overview with its per-minute series, the cause of death of dead jobs, and the audit rows
-- of pause, resume and bulk actions.

-- Failed attempts by when they ended, for the overview's per-minute series. Only attempts
-- that did not succeed are rows of job_attempts, and only those with these outcomes enter
-- this index: a job that succeeds on its first attempt pays nothing for it.
CREATE INDEX IF NOT EXISTS job_attempts_failed_idx
    ON drainpipe.job_attempts (queue, ended_at)
    WHERE outcome IN ('failed', 'discarded', 'expired');

-- The audit log takes the console's writes too: pause and resume (queue, no job) and the
-- row of a bulk call (no job; its filter and counts in detail). Each job a bulk action
-- reaches keeps its own cancel/replay row, as a single action writes.
ALTER TABLE drainpipe.management_audit ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE drainpipe.management_audit ALTER COLUMN queue DROP NOT NULL;
ALTER TABLE drainpipe.management_audit ADD COLUMN IF NOT EXISTS detail jsonb;
ALTER TABLE drainpipe.management_audit DROP CONSTRAINT IF EXISTS management_audit_action_check;
ALTER TABLE drainpipe.management_audit ADD CONSTRAINT management_audit_action_check
    CHECK (action IN ('cancel', 'replay', 'pause', 'resume', 'bulk_cancel', 'bulk_replay'));

-- Pause or resume p_queue and audit it (outcome 'ok' when it changed, 'refused' with
-- QUEUE_ALREADY_PAUSED / QUEUE_NOT_PAUSED when it was so already). Returns the outcome.
CREATE OR REPLACE FUNCTION drainpipe.audited_pause_queue_v1(
    p_target text, p_actor text, p_queue text, p_pause boolean, p_now timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_changed boolean;
BEGIN
    v_changed := CASE WHEN p_pause THEN drainpipe.pause_queue_v1(p_queue, p_now)
                      ELSE drainpipe.resume_queue_v1(p_queue) END;
    INSERT INTO drainpipe.management_audit (at, target, actor, action, queue, outcome, code)
    VALUES (coalesce(p_now, clock_timestamp()), p_target, p_actor,
            CASE WHEN p_pause THEN 'pause' ELSE 'resume' END, p_queue,
            CASE WHEN v_changed THEN 'ok' ELSE 'refused' END,
            CASE WHEN v_changed THEN NULL
                 WHEN p_pause THEN 'QUEUE_ALREADY_PAUSED' ELSE 'QUEUE_NOT_PAUSED' END);
    RETURN CASE WHEN v_changed THEN 'ok' ELSE 'refused' END;
END
$$;

-- The row of one bulk call (its jobs have their own rows): what it matched, did and refused.
CREATE OR REPLACE FUNCTION drainpipe.audit_bulk_action_v1(
    p_target text, p_actor text, p_action text, p_queue text, p_idempotency_key text,
    p_detail jsonb, p_now timestamptz DEFAULT NULL
)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO drainpipe.management_audit
        (at, target, actor, action, queue, outcome, idempotency_key, detail)
    VALUES (coalesce(p_now, clock_timestamp()), p_target, p_actor, p_action, p_queue, 'ok',
            p_idempotency_key, p_detail)
    RETURNING id
$$;

-- The audit log with the console's columns (list_management_audit_v1 keeps its row type).
CREATE OR REPLACE FUNCTION drainpipe.list_management_audit_v2(
    p_target text, p_limit integer, p_before bigint DEFAULT NULL
)
RETURNS TABLE (id bigint, at timestamptz, actor text, action text, queue text, job_id bigint,
               outcome text, code text, idempotency_key text, new_job_id bigint, detail jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.id, a.at, a.actor, a.action, a.queue, a.job_id, a.outcome, a.code,
           a.idempotency_key, a.new_job_id, a.detail
      FROM drainpipe.management_audit AS a
     WHERE a.target = p_target AND (p_before IS NULL OR a.id < p_before)
     ORDER BY a.id DESC
     LIMIT least(greatest(p_limit, 1), 501)
$$;

-- Why dead jobs died: the code of each one's last attempt that has a code (the list shows
-- it next to MAX_ATTEMPTS or DEADLINE_PASSED). One backward probe of the attempts' primary
-- key per job.
CREATE OR REPLACE FUNCTION drainpipe.job_causes_v1(p_queues text[], p_ids bigint[])
RETURNS TABLE (queue text, id bigint, code text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT j.queue, j.id, c.code
      FROM unnest(p_queues, p_ids) AS j(queue, id)
      CROSS JOIN LATERAL (
          SELECT a.code FROM drainpipe.job_attempts a
           WHERE a.queue = j.queue AND a.job_id = j.id AND a.code IS NOT NULL
           ORDER BY a.number DESC LIMIT 1
      ) c
$$;

-- The 60 minutes the overview's series covers, oldest first, ending with p_now's minute.
CREATE OR REPLACE FUNCTION drainpipe.overview_minutes(p_now timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT generate_series(date_trunc('minute', p_now) - interval '59 minutes',
                           date_trunc('minute', p_now), interval '1 minute')
$$;

-- One queue's series as JSON: [{minute, enqueued, succeeded, failed}] x 60, from the
-- per-minute counts each storage reads ({epoch seconds of the minute: n} objects; jobs
-- enqueued are counted where they are now, live or finished, hence two objects).
CREATE OR REPLACE FUNCTION drainpipe.overview_series(
    p_queue text, p_now timestamptz, p_enqueued_live jsonb, p_enqueued_done jsonb,
    p_succeeded jsonb
)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH failed AS (
        SELECT date_trunc('minute', a.ended_at) AS minute, count(*) AS n
          FROM drainpipe.job_attempts a
         WHERE a.queue = p_queue AND a.outcome IN ('failed', 'discarded', 'expired')
           AND a.ended_at >= date_trunc('minute', p_now) - interval '59 minutes'
         GROUP BY 1
    )
    SELECT jsonb_agg(jsonb_build_object(
               'minute', m.minute,
               'enqueued', coalesce((p_enqueued_live ->> m.k)::bigint, 0)
                           + coalesce((p_enqueued_done ->> m.k)::bigint, 0),
               'succeeded', coalesce((p_succeeded ->> m.k)::bigint, 0),
               'failed', coalesce(f.n, 0)) ORDER BY m.minute)
      FROM (SELECT o.minute, extract(epoch FROM o.minute)::bigint::text AS k
              FROM drainpipe.overview_minutes(p_now) AS o(minute)) m
      LEFT JOIN failed f ON f.minute = m.minute
$$;

-- A dead job's cause: the code of its last attempt that has one (NULL when none does).
CREATE OR REPLACE FUNCTION drainpipe.job_cause(p_queue text, p_id bigint)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.code FROM drainpipe.job_attempts a
     WHERE a.queue = p_queue AND a.job_id = p_id AND a.code IS NOT NULL
     ORDER BY a.number DESC LIMIT 1
$$;

-- The overview's counts of finished jobs per queue and state, kept by a statement trigger
-- on what each storage writes when a job finishes or its record is deleted (retention,
-- purge), so reading them costs a few rows whatever the history's size. A statement (a
-- batch of completions) adds one row change per state; the shard (the writer's backend
-- pid, modulo 8) keeps concurrent completers off one another's row lock. Counted exactly
-- from the records when a queue starts being kept (ensure_queue_overview_v1).
CREATE TABLE IF NOT EXISTS drainpipe.job_totals (
    queue text NOT NULL,
    state text NOT NULL,
    shard smallint NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (queue, state, shard)
);
ALTER TABLE drainpipe.job_totals ENABLE ROW LEVEL SECURITY;

-- The queues whose totals are kept (the others are counted from their records).
CREATE TABLE IF NOT EXISTS drainpipe.job_totals_kept (
    queue text PRIMARY KEY
);
ALTER TABLE drainpipe.job_totals_kept ENABLE ROW LEVEL SECURITY;

-- Add p_rows' counts (queue, state, n; n negative for deleted records) to the totals.
CREATE OR REPLACE FUNCTION drainpipe.add_job_totals(p_rows jsonb)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO drainpipe.job_totals AS t (queue, state, shard, n)
    SELECT r.queue, r.state, (pg_backend_pid() % 8)::smallint, r.n
      FROM jsonb_to_recordset(p_rows) AS r(queue text, state text, n bigint)
     WHERE r.n <> 0
     ORDER BY r.queue, r.state  -- one lock order for every writer
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = t.n + excluded.n
$$;

-- The kept totals of p_queue by state ({} when its totals are not kept).
CREATE OR REPLACE FUNCTION drainpipe.kept_job_totals(p_queue text)
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM drainpipe.job_totals_kept k WHERE k.queue = p_queue)
                THEN coalesce((SELECT jsonb_object_agg(s.state, s.n)
                                 FROM (SELECT t.state, sum(t.n) AS n FROM drainpipe.job_totals t
                                        WHERE t.queue = p_queue GROUP BY t.state) s), '{}'::jsonb)
           END
$$;
