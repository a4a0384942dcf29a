-- jobs 0014: a claim starts at a bound instead of at its index's oldest end (issue 37).
--
-- While a session holds an old snapshot (a long report query, a forgotten psql session, a
-- lagging replication slot), vacuum can remove no row version that died after it, and an
-- index scan cannot flag their entries dead either: the claim index's oldest end fills with
-- entries of jobs claimed long ago, and a claim that reads the index from its start visits
-- every one of them (192k entries a claim after a minute; docs/benchmarks.md).
--
-- Each connection keeps, per queue, the visibility time of the oldest job its last claim
-- picked, as two session settings (no table row: a row written per claim would pile up
-- dead versions of its own behind the same snapshot). The next claim on that connection
-- searches the index from there (one more index condition: visible time >= the bound), so
-- the entries below it are skipped by the descent itself. What the bound can hide is picked
-- by a pass from the index's start: a job made due below it (an enqueue that committed after
-- a later job was claimed, a claim rolled back, a visibility time set into the past by
-- hand) waits for the next claim that finds fewer jobs than its batch above the bound, or
-- for the connection's pass from the start, at most claim_bound_pass() apart.
-- A claim given p_now (a caller's clock, as the tests use) neither reads nor keeps one.

-- How often a connection's claims of a queue start from the index's start even when they
-- fill their batches above the bound.
CREATE OR REPLACE FUNCTION drainpipe.claim_bound_pass()
RETURNS interval
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '10 seconds' $$;

-- Where this connection's next claim of p_queue starts: its bound, or -infinity (the
-- index's start) when it has none or its pass from the start is due; p_now is the claim's
-- clock. Epoch microseconds in the settings: no DateStyle or TimeZone can misread them.
CREATE OR REPLACE FUNCTION drainpipe.claim_bound(p_queue text, p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_passed bigint := nullif(current_setting('drainpipe.claim_passed.' || p_queue, true), '')::bigint;
    v_from bigint := nullif(current_setting('drainpipe.claim_from.' || p_queue, true), '')::bigint;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_passed_at timestamptz := 'epoch'::timestamptz + v_passed * interval '1 microsecond';
BEGIN
    IF v_from IS NULL OR v_passed IS NULL
       OR v_passed_at NOT BETWEEN v_now - drainpipe.claim_bound_pass() AND v_now THEN
        PERFORM set_config('drainpipe.claim_passed.' || p_queue,
                           (extract(epoch FROM v_now) * 1000000)::bigint::text, false);
        RETURN '-infinity';
    END IF;
    RETURN 'epoch'::timestamptz + v_from * interval '1 microsecond';
END
$$;

-- After a claim of p_queue picked jobs: the visibility time of the oldest it picked
-- becomes this connection's bound for the queue. Nothing when p_first is NULL (nothing
-- picked) or the claim ran on a caller's clock (p_now given). Returns p_first.
CREATE OR REPLACE FUNCTION drainpipe.keep_claim_bound(
    p_queue text, p_first timestamptz, p_now timestamptz
)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_first IS NOT NULL AND p_now IS NULL AND isfinite(p_first) THEN
        PERFORM set_config('drainpipe.claim_from.' || p_queue,
                           (extract(epoch FROM p_first) * 1000000)::bigint::text, false);
    END IF;
    RETURN p_first;
END
$$;
