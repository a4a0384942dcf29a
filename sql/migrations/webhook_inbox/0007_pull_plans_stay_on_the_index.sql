-- webhook-inbox 0007: pulls, peeks and webhook claims read their index in order, whatever
-- the statistics say (issue 17).
--
-- agent_next_v1 keeps one generic plan per session, made from the table's statistics at
-- that moment. After a VACUUM or ANALYZE taken while the inbox was empty (autovacuum does
-- exactly that when agents keep up), the due index looks empty and, on a table of some
-- 150,000 settled events, the planner picks a Bitmap Heap Scan of every due event and a
-- Sort of them all before the LIMIT: 17 ms a pull at 12,000 due events, and linear in the
-- backlog, so a burst is drained slowest when it is largest. The ordered index scan reads
-- just the events it hands out (0.05 ms there). Without bitmap scans, the plans left that
-- need no sort of the backlog are the ordered scans of agent_events_due_idx (fifo forwards,
-- lifo backwards) and agent_events_ranked_idx (priority); the peek keeps its scan of
-- agent_events_open_idx by id the same way. Turning sorts off instead is no fix: the
-- penalty cost pushes the plan past jit_above_cost, and JIT then compiles for ~0.8 s.
--
-- claim_webhooks_v1 had the same plan, and its dead-letter sweep (messages whose lease
-- ran out on their last attempt) read every due message of the source to find them: it
-- now reads an index of just those.
--
-- A later CREATE OR REPLACE of these functions resets their settings: it must say
-- SET enable_bitmapscan = off itself. tests/agents/test_pull_plan.py and
-- tests/inbox/test_claim_plan.py build the stale-statistics state and check every plan.
-- Runs again as it is.

ALTER FUNCTION drainpipe.agent_next_v1(
    text, text, integer, text, text, text, text, text, text, text, timestamptz)
    SET enable_bitmapscan = off;
ALTER FUNCTION drainpipe.agent_events_v1(
    text, bigint, integer, text, text, text, text, timestamptz)
    SET enable_bitmapscan = off;
ALTER FUNCTION drainpipe.claim_webhooks_v1(text, text, integer, double precision, timestamptz)
    SET enable_bitmapscan = off;
-- the sweep's rows only: a message enters it on the claim of its last attempt
CREATE INDEX IF NOT EXISTS webhook_inbox_exhausted_idx
    ON drainpipe.webhook_inbox (source, available_at)
    WHERE status = 'processing' AND attempts >= max_attempts;
