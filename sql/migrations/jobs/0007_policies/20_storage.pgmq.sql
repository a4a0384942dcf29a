-- Queue policies on pgmq: a statement trigger on each policy queue's pgmq.q_<queue> inserts, so
-- queues without a policy pay nothing and pgmq's own functions (pgmq.send, pgmq_public)
-- obey the policy too.

CREATE OR REPLACE FUNCTION drainpipe.pgmq_queue_policy_insert()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    r record;
BEGIN
    SELECT count(*) AS added, max(drainpipe.policy_payload_size(a.message -> 'payload')) AS largest,
           max(a.vt) AS latest
      INTO r FROM added a;
    IF r.added > 0 THEN
        PERFORM drainpipe.check_policy_insert(substr(TG_TABLE_NAME, 3), r.added, r.largest, r.latest);
    END IF;
    RETURN NULL;
END
$$;

-- A claim of a policy queue whose lease would end past max_lease (a second of slack):
-- refused (DPQ03). Only claims (read_ct grows): pgmq's vt alone cannot tell a heartbeat
-- from a retry's backoff.
CREATE OR REPLACE FUNCTION drainpipe.pgmq_queue_policy_lease()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    v_max double precision;
BEGIN
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p
     WHERE p.queue = substr(TG_TABLE_NAME, 3);
    IF v_max IS NOT NULL AND NEW.vt > clock_timestamp() + make_interval(secs => v_max + 1) THEN
        RAISE EXCEPTION 'a lease ending at % is longer than queue "%"''s max_lease of % s',
            NEW.vt, substr(TG_TABLE_NAME, 3), v_max USING ERRCODE = 'DPQ03';
    END IF;
    RETURN NEW;
END
$$;

-- The live jobs of a queue, counting at most p_limit (a bounded probe).
CREATE OR REPLACE FUNCTION drainpipe.count_live_jobs(p_queue text, p_limit bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM pgmq.%I LIMIT $1) x', 'q_' || p_queue)
      INTO v_count USING p_limit;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.attach_queue_policy_v1(p_queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    v_table regclass;
BEGIN
    PERFORM drainpipe.ensure_job_queue_v1(p_queue);
    v_table := ('pgmq.' || quote_ident('q_' || p_queue))::regclass;
    -- no writer between the count and the triggers: the counter starts exact
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', v_table);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_policy_insert' AND tgrelid = v_table) THEN
        EXECUTE format('CREATE TRIGGER drainpipe_policy_insert AFTER INSERT ON %s
                          REFERENCING NEW TABLE AS added FOR EACH STATEMENT
                          EXECUTE FUNCTION drainpipe.pgmq_queue_policy_insert()', v_table);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'drainpipe_policy_lease' AND tgrelid = v_table) THEN
        EXECUTE format('CREATE TRIGGER drainpipe_policy_lease BEFORE UPDATE OF vt ON %s
                          FOR EACH ROW WHEN (NEW.read_ct > OLD.read_ct)
                          EXECUTE FUNCTION drainpipe.pgmq_queue_policy_lease()', v_table);
    END IF;
    EXECUTE format('INSERT INTO drainpipe.queue_pending (queue, live) SELECT $1, count(*) FROM %s
                    ON CONFLICT (queue) DO UPDATE SET live = excluded.live', v_table) USING p_queue;
END
$$;

-- A held job ends dead now, with a code (PAYLOAD_UNREADABLE, DEADLINE_PASSED): the
-- records' discarding failure (jobs 0004), named for what the client asks.
CREATE OR REPLACE FUNCTION drainpipe.bury_job_v1(
    p_queue text, p_id bigint, p_attempt integer, p_error text, p_code text,
    p_now timestamptz DEFAULT NULL
)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(drainpipe.fail_job_v2(p_queue, p_id, p_attempt, p_error, NULL, p_code, true, p_now) = 'dead', false)
$$;

CREATE OR REPLACE FUNCTION drainpipe.live_job_payloads_v1(p_queue text, p_after bigint, p_limit integer)
RETURNS TABLE (id bigint, payload jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF to_regclass('pgmq.q_' || p_queue) IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT msg_id, message -> ''payload'' FROM pgmq.%I WHERE msg_id > $1 ORDER BY msg_id LIMIT $2',
        'q_' || p_queue) USING coalesce(p_after, 0), least(greatest(coalesce(p_limit, 100), 1), 1000);
END
$$;

CREATE OR REPLACE FUNCTION drainpipe.rewrite_job_payload_v1(
    p_queue text, p_id bigint, p_old jsonb, p_new jsonb
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_done integer;
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    EXECUTE format(
        'UPDATE pgmq.%I SET message = jsonb_set(message, ''{payload}'', $3)
          WHERE msg_id = $1 AND message -> ''payload'' = $2', 'q_' || p_queue)
      USING p_id, p_old, p_new;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    RETURN v_done > 0;
END
$$;

-- Archived jobs (completed and dead) past their queue's retention, with their attempt
-- rows; live jobs never.
CREATE OR REPLACE FUNCTION drainpipe.apply_job_retention_v1(
    p_min_interval double precision DEFAULT NULL, p_batch integer DEFAULT 10000,
    p_now timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_policy drainpipe.queue_policies;
    v_total integer := 0;
    v_count integer;
BEGIN
    IF p_min_interval IS NOT NULL THEN
        UPDATE drainpipe.job_retention_runs SET last_run = v_now
         WHERE id = 1 AND (last_run IS NULL OR last_run <= v_now - make_interval(secs => p_min_interval));
        IF NOT FOUND THEN
            RETURN NULL;  -- ran less than p_min_interval ago (or another caller runs it now)
        END IF;
    END IF;
    FOR v_policy IN SELECT * FROM drainpipe.queue_policies ORDER BY queue LOOP
        CONTINUE WHEN to_regclass('pgmq.a_' || v_policy.queue) IS NULL;
        EXECUTE format(
            'WITH gone AS (DELETE FROM pgmq.%1$I d WHERE d.msg_id = ANY (ARRAY(
                 SELECT x.msg_id FROM pgmq.%1$I x WHERE x.archived_at < $1
                  ORDER BY x.msg_id LIMIT $2)) RETURNING d.msg_id),
                  attempts_gone AS (DELETE FROM drainpipe.job_attempts a USING gone g
                                     WHERE a.queue = $3 AND a.job_id = g.msg_id)
             SELECT count(*)::integer FROM gone', 'a_' || v_policy.queue)
          INTO v_count
          USING v_now - make_interval(secs => v_policy.retention), greatest(coalesce(p_batch, 10000), 1),
                v_policy.queue;
        v_total := v_total + v_count;
    END LOOP;
    RETURN v_total;
END
$$;
