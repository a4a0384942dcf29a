-- jobs: pieces shared by the pgmq and the table backend.

-- Queue names end up in table names (pgmq.q_<queue>), so the pattern is checked in SQL too.
CREATE OR REPLACE FUNCTION drainpipe.assert_queue_name(p_queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL OR p_queue !~ '^[a-z_][a-z0-9_]{0,46}$' THEN
        RAISE EXCEPTION 'Invalid queue name "%": lowercase letters, digits and underscores, at most 47', p_queue
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- The same test as an expression: plpgsql evaluates "IF NOT drainpipe.is_queue_name(..)"
-- on its fast path (the SQL function is inlined), where a PERFORM runs a whole query. Hot
-- functions test with it and call assert_queue_name only to raise.
-- (No SET search_path: a function with one is never inlined. pg_catalog comes first anyway.)
CREATE OR REPLACE FUNCTION drainpipe.is_queue_name(p_queue text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_queue IS NOT NULL AND p_queue ~ '^[a-z_][a-z0-9_]{0,46}$' $$;

-- Full jitter: whole seconds uniform in [1, min(3600, 10 * 2^(attempt-1))], never 0.
CREATE OR REPLACE FUNCTION drainpipe.job_retry_delay(p_attempt integer)
RETURNS double precision
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 1 + floor(random() * least(3600, 10 * power(2, least(greatest(p_attempt, 1) - 1, 20))))
$$;

CREATE OR REPLACE FUNCTION drainpipe.assert_max_attempts(p_max_attempts integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be at least 1, not %', p_max_attempts USING ERRCODE = '22023';
    END IF;
END
$$;

-- The message body pgmq stores: the payload (or the context envelope around it),
-- the attempt limit and, when given, the dedupe key.
CREATE OR REPLACE FUNCTION drainpipe.job_message(p_payload jsonb, p_max_attempts integer, p_dedupe_key text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM drainpipe.assert_max_attempts(p_max_attempts);
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'payload', coalesce(p_payload, '{}'::jsonb),
        'max_attempts', p_max_attempts,
        'dedupe_key', p_dedupe_key
    )) || jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb));
END
$$;

-- claim_jobs once returned the whole message; a changed return type needs a DROP first
-- (CREATE OR REPLACE cannot change it). Safe inside install()'s single transaction.
DO $drop_old_claim$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_proc
         WHERE oid = to_regprocedure('drainpipe.claim_jobs(text, double precision, integer)')
           AND pg_get_function_result(oid) LIKE '%message jsonb%'
    ) THEN
        DROP FUNCTION drainpipe.claim_jobs(text, double precision, integer);
    END IF;
END
$drop_old_claim$;
