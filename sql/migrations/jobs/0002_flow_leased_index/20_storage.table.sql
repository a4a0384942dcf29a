-- jobs 0002: the table's leased index carries each job's key only when some queue has a
-- key_concurrency. A queue-wide concurrency counts a queue's leased jobs by visible_at
-- alone, so it no longer makes every claimed job of every queue evaluate job_key(payload)
-- for an index entry (pgmq's narrow (vt) index, jobs 0022, on the table).

CREATE OR REPLACE FUNCTION drainpipe.ensure_flow_indexes(p_queue text)
 RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path TO 'pg_catalog', 'pg_temp' AS $function$
BEGIN
    -- what is leased, per queue (concurrency) or per queue and key (key_concurrency), bounded
    -- by the limits: only leased rows are in it. The index is table-wide, so every queue's
    -- claims pay for its entries: the key's only when a key limit reads it. The keyed one also
    -- serves the queue-wide counts, and is never dropped here: a key limit committed beside
    -- a concurrency-only queue's ensure must still find it afterwards.
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.key_concurrency IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), visible_at)
            WHERE state = 'leased';
        DROP INDEX IF EXISTS drainpipe.job_messages_flow_leased_queue_idx;
    ELSIF to_regclass('drainpipe.job_messages_flow_leased_idx') IS NULL THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_queue_idx
            ON drainpipe.job_messages (queue, visible_at)
            WHERE state = 'leased';
    END IF;
    -- the live jobs of a key in enqueue order: ordered=True probes for an earlier one
    -- (ensure_queue_flow_v1 calls this after storing the limits)
    IF EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.queue = p_queue AND f.ordered) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_order_idx
            ON drainpipe.job_messages (queue, drainpipe.job_key(payload), id)
            WHERE finished_at IS NULL AND drainpipe.job_key(payload) IS NOT NULL;
    END IF;
END $function$;

-- An install whose queues have no key limit (any more) trades the keyed index for the
-- narrow one once: building it reads the table under a SHARE lock, as ensure_policies()
-- would. Re-runnable: a second run finds the keyed index gone.
DO $$
BEGIN
    IF to_regclass('drainpipe.job_messages_flow_leased_idx') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM drainpipe.queue_flow f WHERE f.key_concurrency IS NOT NULL) THEN
        CREATE INDEX IF NOT EXISTS job_messages_flow_leased_queue_idx
            ON drainpipe.job_messages (queue, visible_at)
            WHERE state = 'leased';
        DROP INDEX drainpipe.job_messages_flow_leased_idx;
    END IF;
END $$;
