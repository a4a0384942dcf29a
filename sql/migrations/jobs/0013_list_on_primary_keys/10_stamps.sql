-- Newest-first listing without an index on enqueued_at (docs/reference.md, job records).
--
-- 0010 listed jobs from an index on (enqueued_at, id) on every table that holds them. Every
-- claim and every settle writes a new row version, so each paid one more index entry: the
-- SQL turn of the hot path ran at 0.86 (pgmq) / 0.88 (table) of its speed without it. The
-- listing now walks the primary keys the hot path keeps anyway, and an enqueue stamps each
-- job so that its id order and its enqueued_at order agree within a known window:
--
--   a job's enqueued_at is the clock read right after its id was drawn, and the clock read
--   right before the draw is at most job_stamp_window() earlier (else the id is drawn again)
--
-- So if job A's id was drawn before job B's, A.enqueued_at - window <= draw(A) < draw(B) <=
-- B.enqueued_at: a job with a smaller id is at most one window newer. Walking ids downwards,
-- once the page's last row is a window newer than a row already read, no row further down
-- can belong to the page, and the walk stops (job_records_newest, pgmq_newest_range). The
-- walk reads the page plus about one window's worth of enqueues.
CREATE OR REPLACE FUNCTION drainpipe.job_stamp_window()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 millisecond' $$;

-- One id from p_sequence and its stamp, drawn again until the clock reads around the draw
-- are within the window (a backend paused between them, by the OS or a VM, would otherwise
-- stamp the id late). An enqueue of many jobs draws its ids in one statement and calls this
-- only for the rare id whose reads were too far apart.
DO $types$
BEGIN
    IF to_regtype('drainpipe.job_stamp_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_stamp_v1 AS (id bigint, at timestamptz);
    END IF;
END
$types$;

CREATE OR REPLACE FUNCTION drainpipe.job_stamp(p_sequence regclass)
RETURNS drainpipe.job_stamp_v1
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_before timestamptz;
    v_stamp drainpipe.job_stamp_v1;
BEGIN
    LOOP
        -- one statement, planned before it runs: nothing but the draw between the reads
        SELECT clock_timestamp(), nextval(p_sequence), clock_timestamp()
          INTO v_before, v_stamp.id, v_stamp.at;
        -- (a clock stepped back reads as no time at all: the id is kept)
        EXIT WHEN v_stamp.at - v_before <= drainpipe.job_stamp_window();
    END LOOP;
    RETURN v_stamp;
END
$$;
