-- jobs 0021: the storages build the index of ordered groups only for an ordered queue
-- (20_storage.*.sql), so the limits are stored before their indexes are built.

-- Stores (or, all NULL and not ordered, removes) the flow limits of p_queue. Called by
-- ensure_queue_policy_v3; the storage's ensure_flow_indexes builds what the limits read,
-- once they are stored (jobs 0021: it reads whether the queue is ordered).
CREATE OR REPLACE FUNCTION drainpipe.ensure_queue_flow_v1(
    p_queue text, p_concurrency integer, p_key_concurrency integer,
    p_rate_count integer, p_rate_per double precision,
    p_key_rate_count integer, p_key_rate_per double precision, p_ordered boolean
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM drainpipe.assert_queue_name(p_queue);
    IF p_concurrency IS NULL AND p_key_concurrency IS NULL AND p_rate_count IS NULL
       AND p_key_rate_count IS NULL AND NOT coalesce(p_ordered, false) THEN
        DELETE FROM drainpipe.queue_flow WHERE queue = p_queue;
        RETURN;
    END IF;
    INSERT INTO drainpipe.queue_flow AS f (queue, concurrency, key_concurrency, rate_count,
                                           rate_per, key_rate_count, key_rate_per, ordered)
    VALUES (p_queue, p_concurrency, p_key_concurrency, p_rate_count, p_rate_per,
            p_key_rate_count, p_key_rate_per, coalesce(p_ordered, false))
    ON CONFLICT (queue) DO UPDATE
       SET concurrency = excluded.concurrency, key_concurrency = excluded.key_concurrency,
           rate_count = excluded.rate_count, rate_per = excluded.rate_per,
           key_rate_count = excluded.key_rate_count, key_rate_per = excluded.key_rate_per,
           ordered = excluded.ordered;
    -- after the row: the storage builds the index of ordered groups for an ordered queue only
    PERFORM drainpipe.ensure_flow_indexes(p_queue);
END
$$;
