-- Queue policies on the table backend: a statement trigger on drainpipe.job_messages' inserts,
-- attached when the first policy is stored (a database without policies pays nothing).

CREATE OR REPLACE FUNCTION drainpipe.job_messages_policy_insert()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.queue, count(*) AS added, max(drainpipe.policy_payload_size(a.payload)) AS largest,
               max(a.visible_at) AS latest
          FROM added a
         WHERE a.queue IN (SELECT p.queue FROM drainpipe.queue_policies p)
         GROUP BY a.queue
    LOOP
        PERFORM drainpipe.check_policy_insert(r.queue, r.added, r.largest, r.latest);
    END LOOP;
    RETURN NULL;
END
$$;

-- A claim or heartbeat of a policy queue whose lease would end past max_lease (a second
-- of slack): refused (DPQ03). A claim's lease is exact (visible_at - started_at, both its
-- p_now); a heartbeat's is measured from the server clock.
CREATE OR REPLACE FUNCTION drainpipe.job_messages_policy_lease()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
    v_max double precision;
    v_from timestamptz;
BEGIN
    SELECT p.max_lease INTO v_max FROM drainpipe.queue_policies p WHERE p.queue = NEW.queue;
    IF v_max IS NULL THEN
        RETURN NEW;
    END IF;
    v_from := CASE WHEN NEW.attempts > OLD.attempts THEN NEW.started_at
                   ELSE greatest(clock_timestamp(), NEW.started_at) END;
    IF NEW.visible_at > v_from + make_interval(secs => v_max + 1) THEN
        RAISE EXCEPTION 'a lease of % s is longer than queue "%"''s max_lease of % s',
            round(extract(epoch FROM NEW.visible_at - v_from)::numeric, 3), NEW.queue, v_max
            USING ERRCODE = 'DPQ03';
    END IF;
    RETURN NEW;
END
$$;

-- The live jobs of a queue, counting at most p_limit (a bounded index probe).
CREATE OR REPLACE FUNCTION drainpipe.count_live_jobs(p_queue text, p_limit bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM drainpipe.job_messages m
         WHERE m.queue = p_queue AND m.finished_at IS NULL LIMIT p_limit) x
$$;

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
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'job_messages_policy_lease'
                      AND tgrelid = 'drainpipe.job_messages'::regclass) THEN
        -- claims and heartbeats only (a failure moves to retry_wait: its backoff is no lease)
        CREATE TRIGGER job_messages_policy_lease BEFORE UPDATE OF visible_at ON drainpipe.job_messages
            FOR EACH ROW WHEN (NEW.state = 'leased' AND NEW.visible_at > OLD.visible_at)
            EXECUTE FUNCTION drainpipe.job_messages_policy_lease();
    END IF;
    INSERT INTO drainpipe.queue_pending (queue, live)
    SELECT p_queue, count(*) FROM drainpipe.job_messages WHERE queue = p_queue AND finished_at IS NULL
    ON CONFLICT (queue) DO UPDATE SET live = excluded.live;
END
$$;

-- A held job ends dead now, with a code (PAYLOAD_UNREADABLE): the records' discarding
-- failure (jobs 0004), named for what the client asks.
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

-- Live jobs' stored payloads in id order after p_after (reencrypt pages through them).
CREATE OR REPLACE FUNCTION drainpipe.live_job_payloads_v1(p_queue text, p_after bigint, p_limit integer)
RETURNS TABLE (id bigint, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.id, m.payload FROM drainpipe.job_messages m
     WHERE m.queue = p_queue AND m.id > coalesce(p_after, 0) AND m.finished_at IS NULL
     ORDER BY m.id LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000)
$$;

-- Compare and set: a payload changed since it was read is left alone (false).
CREATE OR REPLACE FUNCTION drainpipe.rewrite_job_payload_v1(
    p_queue text, p_id bigint, p_old jsonb, p_new jsonb
)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE drainpipe.job_messages SET payload = p_new
     WHERE id = p_id AND queue = p_queue AND payload = p_old AND finished_at IS NULL;
    RETURN FOUND;
END
$$;

-- Terminal records past their queue's retention (succeeded, dead and cancelled rows, with
-- their attempt rows and dedupe keys); live jobs are never touched. At most p_batch per
-- queue a call.
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
        WITH gone AS (
            DELETE FROM drainpipe.job_messages d
             WHERE d.id = ANY (ARRAY(
                   SELECT x.id FROM drainpipe.job_messages x
                    WHERE x.queue = v_policy.queue AND x.finished_at IS NOT NULL
                      AND x.finished_at < v_now - make_interval(secs => v_policy.retention)
                    ORDER BY x.finished_at LIMIT greatest(coalesce(p_batch, 10000), 1)))
            RETURNING d.queue, d.id
        ), attempts_gone AS (
            DELETE FROM drainpipe.job_attempts a USING gone g
             WHERE a.queue = g.queue AND a.job_id = g.id
        )
        SELECT count(*) INTO v_count FROM gone;
        v_total := v_total + v_count;
    END LOOP;
    RETURN v_total;
END
$$;
