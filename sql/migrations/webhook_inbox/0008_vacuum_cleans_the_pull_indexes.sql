-- webhook-inbox 0008: every vacuum of the two queue tables also cleans their indexes, and
-- autovacuum comes by after a fixed number of dead rows, not a share of the table (issue 17).
--
-- A hand-out moves an event's entry in agent_events_due_idx from its arrival to the end of
-- its lease, and an ack takes it out; a claim of webhook_inbox does the same to
-- webhook_inbox_ready_idx. The dead entries stay at the front of the index, where every
-- pull starts its scan, and no insert ever lands on those pages to prune them: only a
-- vacuum of the indexes removes them. Until then each pull steps over every event handed
-- out since the last one (measured: 30,000 events later a pull read 360 buffers and took
-- 1.5 ms instead of 13 buffers and 0.05 ms).
--
-- Both tables keep their settled rows (records, until purged), so they are large, and a
-- vacuum with index_cleanup's default (auto, since PostgreSQL 14) skips the indexes when
-- fewer than 2% of the table's pages hold dead rows: "index scan bypassed" in VACUUM
-- VERBOSE, and the pulls keep stepping over the same dead entries. The default autovacuum
-- threshold (20% of the table) lets a table of a million settled rows take 100,000
-- hand-outs first. Here a vacuum always cleans the indexes, and autovacuum runs after
-- 5,000 dead rows (about 2,500 events), whatever the table's size; each run reads every
-- index of the table once, throttled as autovacuum always is.
--
-- Storage parameters only: no rewrite, no lock beyond a moment's. Runs again as it is.

ALTER TABLE drainpipe.agent_events SET (
    vacuum_index_cleanup = on,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000
);
ALTER TABLE drainpipe.webhook_inbox SET (
    vacuum_index_cleanup = on,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000
);
