-- webhook-inbox 0012: the bytes a webhook arrived with are kept beside its parsed payload, so
-- an agent that reads an event's raw body (GET /v1/events/{id}/raw, agents.raw()) gets
-- exactly what the sender signed and can check the signature again. jsonb does not keep
-- them: it reorders keys, drops duplicates and whitespace, and rewrites numbers.
--
-- Expand only, so the previous release keeps working beside this one: receive_webhook_v2
-- and agent_raw_v1 stay as they were (a message stored through v2 has no raw bytes, and
-- agent_raw_v2 answers its payload's text for it, as v1 did).

ALTER TABLE drainpipe.webhook_inbox ADD COLUMN IF NOT EXISTS raw bytea;

-- receive_webhook_v2 plus the body's bytes as received (a store()d message: its payload
-- serialised once, at store time).
CREATE OR REPLACE FUNCTION drainpipe.receive_webhook_v3(
    p_source text,
    p_message_id text,
    p_event_type text,
    p_payload jsonb,
    p_headers jsonb DEFAULT '{}',
    p_tenant text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_app text DEFAULT NULL,
    p_verified boolean DEFAULT false,
    p_raw bytea DEFAULT NULL
)
RETURNS SETOF drainpipe.webhook_receipt_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := nullif(p_tenant, '');
    v_id bigint;
BEGIN
    IF coalesce(p_source, '') = '' OR coalesce(p_message_id, '') = '' THEN
        RAISE EXCEPTION 'A webhook needs a source and a message id' USING ERRCODE = '22023';
    END IF;
    FOR i IN 1..3 LOOP
        INSERT INTO drainpipe.webhook_inbox AS w
               (source, message_id, event_type, payload, headers, tenant, max_attempts, app,
                verified, raw)
        VALUES (p_source, p_message_id, p_event_type, coalesce(p_payload, 'null'::jsonb),
                coalesce(p_headers, '{}'::jsonb), v_tenant, greatest(coalesce(p_max_attempts, 8), 1),
                nullif(p_app, ''), coalesce(p_verified, false), p_raw)
        ON CONFLICT (source, (coalesce(tenant, '')), message_id) DO NOTHING
        RETURNING w.id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, false;
            RETURN;
        END IF;
        SELECT w.id INTO v_id FROM drainpipe.webhook_inbox w
         WHERE w.source = p_source AND coalesce(w.tenant, '') = coalesce(v_tenant, '')
           AND w.message_id = p_message_id;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'Could not store webhook % of %', p_message_id, p_source USING ERRCODE = '40001';
END
$$;

-- The event's body as bytes: as received, else (a message stored before 0012, or by the
-- previous release) its payload's text. No row: no such event within p_inboxes; a NULL
-- body: its webhook message was purged.
CREATE OR REPLACE FUNCTION drainpipe.agent_raw_v2(p_id bigint, p_inboxes text[] DEFAULT NULL)
RETURNS TABLE (inbox_id text, body bytea)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.inbox_id, coalesce(w.raw, convert_to(w.payload::text, 'UTF8'))
      FROM drainpipe.agent_events e
      LEFT JOIN drainpipe.webhook_inbox w ON w.id = e.message_id
     WHERE e.id = p_id AND (p_inboxes IS NULL OR e.inbox_id = ANY (p_inboxes))
$$;
