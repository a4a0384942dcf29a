-- Job totals: a settler adds to a shard row no other open transaction is writing.
-- Until now the shard was pg_backend_pid() % 8: two lanes of one drain landed on one shard in
-- most rounds (four lanes: ~59%), and the second then waited on the first one's row lock
-- until it committed. The fused turn claims after its completions' trigger, so that wait
-- was the other lane's whole claim, every turn (docs/job-inbox.md, "The totals' shards").
-- Now the shards are 16 and each has a transaction-scoped advisory lock that its writer
-- holds: a settler starts at its pid's shard and takes the first one whose lock it gets
-- without waiting, so it never waits on another settler's row. Only with every shard taken
-- (16 transactions settling at once) does it wait, for its pid's shard, as it used to.
-- The lock ends with the transaction (PgBouncer's transaction pooling is fine) and is
-- re-entrant (a transaction that settles again gets its shard back). Readers sum a queue's
-- shards as before (at most 16 rows a state); recount_job_totals_v1 folds them into one.
-- plpgsql now: it keeps its statement's plan, which a LANGUAGE sql function planned again
-- at every call before Postgres 18.
CREATE OR REPLACE FUNCTION drainpipe.add_job_totals(p_rows jsonb)
 RETURNS void LANGUAGE plpgsql SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
DECLARE
    c_shards constant integer := 16;
    c_lock constant integer := hashtext('drainpipe.job_totals');
    v_start integer := pg_backend_pid() % c_shards;
    v_shard integer := v_start;
    v_probe integer := 0;
BEGIN
    -- the pid spreads the lanes over the shards (and a held snapshot's row versions with
    -- them); the probe steps aside from a shard another open transaction writes. Only the
    -- holder of a shard's lock writes its rows (and a recount, which locks the settlers out
    -- of the records it counts first).
    WHILE v_probe < c_shards
          AND NOT pg_try_advisory_xact_lock(c_lock, v_shard) LOOP
        v_probe := v_probe + 1;
        v_shard := (v_start + v_probe) % c_shards;
    END LOOP;
    IF v_probe = c_shards THEN  -- every shard is being written: wait for the pid's one
        PERFORM pg_advisory_xact_lock(c_lock, v_shard);
    END IF;
    INSERT INTO drainpipe.job_totals AS t (queue, state, shard, n)
    SELECT r.queue, r.state, v_shard::smallint, r.n
      FROM jsonb_to_recordset(p_rows) AS r(queue text, state text, n bigint)
     WHERE r.n <> 0
     ORDER BY r.queue, r.state  -- one lock order for every writer
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = t.n + excluded.n;
END $function$;
