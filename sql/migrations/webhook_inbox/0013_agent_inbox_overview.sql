-- webhook-inbox 0013: the agent inboxes in the console's overview (GET /inboxes of the
-- management app). One row per inbox: its events counted by state, the streams open now,
-- and the age of its oldest open (pending or leased) event. Metadata only: no body, no
-- outcome, no error text, no lease token or holder leaves this function.
--
-- A function rather than a statement of the app's own: the agent inbox's tables have row
-- level security on and are read through security-definer functions only.
--
-- It counts the kept events of every inbox in one pass over agent_events (settled events
-- stay until they are purged), so it costs what that table holds: read it as an overview,
-- refreshed every few seconds, not as a hot path. Expand only.

CREATE OR REPLACE FUNCTION drainpipe.agent_inbox_overview_v1(p_now timestamptz DEFAULT NULL)
RETURNS TABLE (
    inbox_id text, name text, counts jsonb, open_streams integer,
    oldest_open_age_s double precision
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH clock AS (
        SELECT coalesce(p_now, clock_timestamp()) AS now
    ), per_state AS (
        SELECT e.inbox_id, e.state, count(*) AS n,
               min(e.received_at) FILTER (WHERE e.state IN ('pending', 'leased')) AS oldest
          FROM drainpipe.agent_events e
         GROUP BY e.inbox_id, e.state
    ), per_inbox AS (
        SELECT p.inbox_id, jsonb_object_agg(p.state, p.n) AS counts, min(p.oldest) AS oldest
          FROM per_state p
         GROUP BY p.inbox_id
    ), streams AS (
        -- a slot counts while its lease runs: a crashed process's slot stops counting
        -- when it would free itself
        SELECT s.inbox_id, count(*) AS n
          FROM drainpipe.agent_stream_slots s, clock
         WHERE s.until > clock.now
         GROUP BY s.inbox_id
    )
    SELECT i.id, i.name, coalesce(c.counts, '{}'::jsonb), coalesce(st.n, 0)::integer,
           CASE WHEN c.oldest IS NULL THEN NULL
                ELSE greatest(extract(epoch FROM (clock.now - c.oldest))::double precision, 0)
           END
      FROM drainpipe.agent_inboxes i
      CROSS JOIN clock
      LEFT JOIN per_inbox c ON c.inbox_id = i.id
      LEFT JOIN streams st ON st.inbox_id = i.id
     ORDER BY i.name, i.id
$$;
