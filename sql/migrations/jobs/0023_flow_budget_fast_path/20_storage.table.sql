-- The table: what QueuePolicy() and a concurrency far from binding cost a claim
-- (10_flow_budget.sql).
--
-- The lease trigger (jobs 0007) ran its function for every job claimed, of any queue once
-- one queue had a policy, to read the queue's max_lease and compare: a plpgsql call with
-- three SET clauses per row. Its WHEN clause now holds a bound, the smallest max_lease of
-- all the policies, so only a lease that may be too long for some queue calls the
-- function, which reads its own queue's policy as before. A lease is measured from the
-- attempt's start (a claim) or from now (a heartbeat), never before started_at, so a lease
-- ending within the bound of started_at is within every queue's max_lease.

-- The lease trigger, its WHEN bound at the smallest max_lease of the policies (a second of
-- slack, as the function's own check); rewritten only when that bound changed (the
-- trigger's argument says which one it holds), so an unchanged policy takes no lock.
CREATE OR REPLACE FUNCTION drainpipe.ensure_lease_trigger()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_max double precision;
BEGIN
    SELECT min(p.max_lease) INTO v_max FROM drainpipe.queue_policies p;
    IF v_max IS NULL OR EXISTS (
           SELECT 1 FROM pg_trigger t
            WHERE t.tgrelid = 'drainpipe.job_messages'::regclass AND t.tgname = 'job_messages_policy_lease'
              AND t.tgargs = convert_to(v_max::text, 'UTF8') || '\x00'::bytea) THEN
        RETURN;
    END IF;
    -- claims and heartbeats only (a failure moves to retry_wait: its backoff is no lease)
    EXECUTE format('CREATE OR REPLACE TRIGGER job_messages_policy_lease
                      BEFORE UPDATE OF visible_at ON drainpipe.job_messages
                      FOR EACH ROW WHEN (NEW.state = ''leased'' AND NEW.visible_at > OLD.visible_at
                                         AND (NEW.started_at IS NULL
                                              OR NEW.visible_at > NEW.started_at + make_interval(secs => %L::double precision + 1)))
                      EXECUTE FUNCTION drainpipe.job_messages_policy_lease(%L)',
                   v_max::text, v_max::text);
END
$$;
REVOKE ALL ON FUNCTION drainpipe.ensure_lease_trigger() FROM PUBLIC;

-- jobs 0007's, the lease trigger bound by the stored max_leases (ensure_lease_trigger).
CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
BEGIN
    -- no writer between the count and the triggers: the counter starts exact
    LOCK TABLE drainpipe.job_messages IN SHARE ROW EXCLUSIVE MODE;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'job_messages_policy_insert'
                      AND tgrelid = 'drainpipe.job_messages'::regclass) THEN
        CREATE TRIGGER job_messages_policy_insert AFTER INSERT ON drainpipe.job_messages
            REFERENCING NEW TABLE AS added
            FOR EACH STATEMENT EXECUTE FUNCTION drainpipe.job_messages_policy_insert();
    END IF;
    PERFORM drainpipe.ensure_lease_trigger();
    INSERT INTO drainpipe.queue_pending (queue, live)
    SELECT p_queue, count(*) FROM drainpipe.job_messages WHERE queue = p_queue AND finished_at IS NULL
    ON CONFLICT (queue) DO UPDATE SET live = excluded.live;
END
$$;

-- An existing lease trigger: bound.
SELECT drainpipe.ensure_lease_trigger();

-- jobs 0022's, the room from the session's chunk first (flow_budget_spend, jobs 0023).
CREATE OR REPLACE FUNCTION drainpipe.job_messages_flow_room(
    p_flow drainpipe.queue_flow, p_batch integer, p_now timestamptz
)
RETURNS integer
-- no SET clause and not a security definer: called only by the claim functions, whose
-- settings it runs under (a SET clause costs every call a save and restore)
LANGUAGE plpgsql
AS $$
DECLARE
    v_leased bigint := 0;
    v_room integer;
BEGIN
    IF p_flow.concurrency IS NOT NULL THEN
        v_room := drainpipe.flow_budget_spend(p_flow.queue, p_batch);
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_budget_take(p_flow, p_batch);
    END IF;
    IF v_room >= 0 THEN
        RETURN v_room;
    END IF;
    IF v_room IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('drainpipe.flow'), hashtext(p_flow.queue));
    ELSIF drainpipe.flow_budget_pending(p_flow.queue) < 0 THEN
        RETURN 0;
    END IF;
    IF p_flow.concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_leased FROM drainpipe.job_messages l
         WHERE l.queue = p_flow.queue AND l.state = 'leased' AND l.visible_at > p_now;
    END IF;
    IF v_room IS NULL THEN
        v_room := drainpipe.flow_room(p_flow, p_batch, v_leased, p_now);
        IF p_flow.concurrency IS NOT NULL THEN
            PERFORM drainpipe.flow_budget_reset(p_flow, v_leased, v_room);
        END IF;
        RETURN v_room;
    END IF;
    -- the budget ran out under the shared lock: its chunks count as leased
    RETURN drainpipe.flow_room(p_flow, p_batch, v_leased + drainpipe.flow_budget_pending(p_flow.queue), p_now);
END
$$;

-- A completion, and a heartbeat, of jobs by id: their rows by primary key. Under a generic
-- plan, `state = 'leased'` lets the planner read the whole queue's leased jobs from
-- job_messages_flow_leased_idx (built once any queue has limits, its predicate that same
-- condition) and join them to the ids, dead entries included: a completion cost
-- O(leased) instead of one probe per job. The state compared with a variable is a
-- parameter of the plan, which cannot prove the index's predicate.
CREATE OR REPLACE FUNCTION drainpipe.complete_jobs_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    c_leased constant text := 'leased';
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_done integer;
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET state = 'succeeded', finished_at = v_now, last_code = NULL
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.attempts = f.attempt AND m.queue = p_queue AND m.state = c_leased
    RETURNING m.id;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_ids) THEN
        UPDATE drainpipe.job_attempts a
           SET late_outcome = 'succeeded'
          FROM unnest(p_ids, p_attempts) AS f(id, attempt)
         WHERE a.queue = p_queue AND a.job_id = f.id AND a.number = f.attempt
           AND a.outcome = 'cancelled' AND a.late_outcome IS NULL;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.extend_job_leases_v1(
    p_queue text, p_ids bigint[], p_attempts integer[], p_lease double precision,
    p_now timestamptz DEFAULT NULL
)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    c_leased constant text := 'leased';
    v_until timestamptz := coalesce(p_now, clock_timestamp()) + make_interval(secs => greatest(p_lease, 0));
BEGIN
    RETURN QUERY
    UPDATE drainpipe.job_messages m
       SET visible_at = v_until
      FROM unnest(p_ids, p_attempts) AS f(id, attempt)
     WHERE m.id = f.id AND m.queue = p_queue AND m.attempts = f.attempt AND m.state = c_leased
    RETURNING m.id;
END
$$;
