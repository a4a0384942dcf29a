-- Claims as HOT updates on the table backend, measured on the server only (issue 21). NOT
-- installed by anything: a prototype written down so it can be run again.
-- The numbers: `git show 9b265e0:docs/benchmarks.md` ("Claims that update their row in place"). Built in
-- full as a jobs migration (every function of the contract moved to the new shape), it
-- passed the jobs, policies and admin suites and failed issue 19's flat-claim test: a claim
-- has to step over every job held at the front of its index. It was not shipped.
--
-- The idea. Postgres writes a new row version without touching any index (a HOT update)
-- when no indexed column changes value and the page has room. drainpipe's claim changes
-- visible_at (the claim index's key) and attempts and state (index predicates), so every
-- claim adds an entry to the primary key and to the claim index. Here the lease end is a
-- column no index names (leased_until), visible_at stays the time the job became due, and
-- state is not written by a claim; the waiting-dedupe key moves to a column of its own
-- (cleared by a keyed job's first claim). Inserts fill pages to fillfactor, so that a
-- batch's new versions fit beside the old ones: 40 or less for every claim to be HOT.
--
-- The price. A held job stays in the claim index where it was, so every claim steps over
-- the jobs held at the front: about 0.25 µs a job, a claim (0.43 ms for a claim of 10 with
-- nothing held ahead, 5.3 ms with 20,000 held ahead). With the lanes of all workers
-- together holding H jobs, that is 0.25 × H µs a claim, against the 4-5 µs a job the HOT
-- claim saves: a loss past about 20 lanes. And the table takes 2-2.5 times the space.
--
-- How it was run (PostgreSQL 15, a database with drainpipe's jobs module on the table
-- backend; psql -v ff=40 -f this file):
--   1. before each run: TRUNCATE, 105,000 jobs of queue 'q', VACUUM ANALYZE, CHECKPOINT;
--   2. pgbench -n -c 5 -j 2 -t 200 -M prepared -D ids={} -D att={} -f <script>, the sides
--      alternated, CPU per job from /proc/stat (the machine otherwise idle), scripts:
--        SELECT coalesce(array_agg(c.id), '{}') AS ids, coalesce(array_agg(c.attempts), '{}') AS att,
--               count(c.payload), sum(date_part('epoch', c.enqueued_at) + date_part('epoch', c.visible_until))
--          FROM proto_hot_turn('q', :ids::bigint[], :att::integer[], 30, 100) c \gset
--      the same over drainpipe.complete_and_claim_jobs_v1, and bench.threaded's thr-skip-keep
--      statements on their own table (`git show 9b265e0:docs/benchmarks.md`, "The table's processing on the
--      server", shows them).

-- drainpipe's row, with two more columns. visible_at is when the job became due (delay end,
-- backoff end) and state is 'queued', 'retry_wait' or terminal: a claim writes neither.
CREATE TABLE IF NOT EXISTS proto_hot_jobs (
    LIKE drainpipe.job_messages INCLUDING DEFAULTS INCLUDING IDENTITY,
    PRIMARY KEY (id),
    -- the lease end of the attempt held now; no index names it
    leased_until timestamptz,
    -- the dedupe key of a job never claimed (the waiting-dedupe uniqueness)
    waiting_key text
) WITH (fillfactor = :ff);

-- drainpipe's indexes, less the exhausted-lease index (keyed on attempts: the pick buries
-- those leases instead), with the waiting-dedupe index on waiting_key
CREATE INDEX IF NOT EXISTS proto_hot_live ON proto_hot_jobs (queue, visible_at, id) WHERE finished_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS proto_hot_waiting ON proto_hot_jobs (queue, waiting_key)
    WHERE waiting_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX IF NOT EXISTS proto_hot_live_key ON proto_hot_jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX IF NOT EXISTS proto_hot_finished ON proto_hot_jobs (queue, finished_at) INCLUDE (state)
    WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS proto_hot_dead ON proto_hot_jobs (queue, id) WHERE state = 'dead' AND replayed_by IS NULL;

-- A lane's turn: complete the previous batch (fenced by attempt and lease), claim the next.
-- Left out (the migration had them): refusals, the take-over records of lapsed leases,
-- burying leases that ran out on their last attempt.
CREATE OR REPLACE FUNCTION proto_hot_turn(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision, p_batch integer
)
RETURNS TABLE (id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
               payload jsonb, max_attempts integer, last_error text, refused boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz;
    v_until timestamptz;
    v_ids bigint[];
BEGIN
    IF cardinality(p_ids) > 0 THEN
        -- finished_at leaves the claim index's predicate: not HOT, as in a raw loop
        UPDATE proto_hot_jobs m
           SET state = 'succeeded', finished_at = clock_timestamp(), last_code = NULL, leased_until = NULL
          FROM unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue
           AND m.finished_at IS NULL AND m.leased_until IS NOT NULL;
    END IF;
    v_now := clock_timestamp();
    v_until := v_now + make_interval(secs => p_lease);
    SELECT array_agg(x.id) INTO v_ids FROM (
        SELECT x.id FROM proto_hot_jobs x
         WHERE x.queue = p_queue AND x.finished_at IS NULL AND x.visible_at <= v_now
           -- the step-over: a held job is read and thrown away by every claim that passes
           AND (x.leased_until IS NULL OR x.leased_until <= v_now)
         ORDER BY x.visible_at, x.id
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED) x;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    -- no indexed column changes value: HOT when the page has room
    RETURN QUERY
    UPDATE proto_hot_jobs j
       SET attempts = j.attempts + 1, leased_until = v_until, started_at = v_now, waiting_key = NULL
     WHERE j.id = ANY (v_ids)
    RETURNING j.id, j.attempts, j.enqueued_at, j.leased_until, j.payload, j.max_attempts, j.last_error, false;
END
$$;
