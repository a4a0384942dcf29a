-- The table: job_messages keeps every record, a job finishes by an UPDATE that sets
-- finished_at (complete, skip, fail to dead, cancel, the dead sweep), and retention and
-- purge DELETE finished rows. The triggers count what those statements change. A
-- transition table cannot go with a column list (UPDATE OF finished_at), so every UPDATE
-- statement fires the trigger (a claim's, a heartbeat's too) and finds nothing finished:
-- one call per statement, not per row (its cost: docs/benchmarks.md).
CREATE OR REPLACE FUNCTION drainpipe.table_job_totals()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rows jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', -c.n)) INTO v_rows
          FROM (SELECT g.queue, g.state, count(*) AS n FROM gone g
                 WHERE g.finished_at IS NOT NULL GROUP BY 1, 2) c;
    ELSE
        -- a claim or a heartbeat: no row of it is finished, and nothing is written
        SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'state', c.state, 'n', c.n)) INTO v_rows
          FROM (SELECT x.queue, x.state, sum(x.n) AS n
                  FROM (SELECT a.queue, a.state, 1 AS n FROM added a WHERE a.finished_at IS NOT NULL
                        UNION ALL
                        SELECT g.queue, g.state, -1 FROM gone g WHERE g.finished_at IS NOT NULL) x
                 GROUP BY 1, 2
                HAVING sum(x.n) <> 0) c;
    END IF;
    IF v_rows IS NOT NULL THEN
        PERFORM drainpipe.add_job_totals(v_rows);
    END IF;
    RETURN NULL;
END
$$;

-- Count the totals again from the records (a repair, or after rows were written around
-- the triggers, e.g. inserted finished): writers wait between the count and the commit.
-- Every queue of the table is kept. Returns the records counted.
CREATE OR REPLACE FUNCTION drainpipe.recount_job_totals_v1(p_queues text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_total bigint;
BEGIN
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM drainpipe.job_totals;
    INSERT INTO drainpipe.job_totals (queue, state, shard, n)
    SELECT m.queue, m.state, 0, count(*) FROM drainpipe.job_messages m
     WHERE m.finished_at IS NOT NULL GROUP BY 1, 2;
    INSERT INTO drainpipe.job_totals_kept (queue)
    SELECT DISTINCT t.queue FROM drainpipe.job_totals t ON CONFLICT DO NOTHING;
    SELECT coalesce(sum(n), 0) INTO v_total FROM drainpipe.job_totals;
    RETURN v_total;
END
$$;

-- Not on INSERT: enqueues write live rows only, and an insert trigger would cost each one.
DO $totals$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_totals_update'
                     AND tgrelid = 'drainpipe.job_messages'::regclass) THEN
        PERFORM drainpipe.recount_job_totals_v1();
        CREATE TRIGGER drainpipe_totals_update AFTER UPDATE ON drainpipe.job_messages
            REFERENCING OLD TABLE AS gone NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();
        CREATE TRIGGER drainpipe_totals_delete AFTER DELETE ON drainpipe.job_messages
            REFERENCING OLD TABLE AS gone
            FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.table_job_totals();
    END IF;
END
$totals$;
