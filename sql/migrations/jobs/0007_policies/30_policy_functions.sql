-- Stores a queue's policy and attaches its triggers (both backends define the attach).
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_policy_v1(
    p_queue text, p_max_payload_bytes integer, p_max_pending integer,
    p_lease double precision, p_max_lease double precision, p_max_delay double precision,
    p_max_attempts integer, p_attempt_window double precision, p_retention double precision,
    p_encrypt boolean
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    INSERT INTO drainpipe.queue_policies AS p (queue, max_payload_bytes, max_pending, lease,
        max_lease, max_delay, max_attempts, attempt_window, retention, encrypt)
    VALUES (p_queue, p_max_payload_bytes, p_max_pending, p_lease, p_max_lease, p_max_delay,
            p_max_attempts, p_attempt_window, p_retention, p_encrypt)
    ON CONFLICT (queue) DO UPDATE SET
        max_payload_bytes = excluded.max_payload_bytes, max_pending = excluded.max_pending,
        lease = excluded.lease, max_lease = excluded.max_lease, max_delay = excluded.max_delay,
        max_attempts = excluded.max_attempts, attempt_window = excluded.attempt_window,
        retention = excluded.retention, encrypt = excluded.encrypt,
        updated_at = clock_timestamp();
    PERFORM drainpipe.attach_queue_policy_v1(p_queue);
END
$$;
