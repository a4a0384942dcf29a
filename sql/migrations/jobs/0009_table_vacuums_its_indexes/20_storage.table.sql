-- jobs 0009 (table): every vacuum of drainpipe.job_messages also cleans its indexes, and
-- autovacuum comes by after a fixed number of dead rows (issue 21). The table keeps its
-- finished jobs (records), so it is large, and the claims' index (job_messages_live_idx)
-- loses its entries at the front, where every claim starts: the same reasons and numbers
-- as webhook-inbox 0008 (docs/sql.md). Storage parameters only. Runs again as it is.

ALTER TABLE drainpipe.job_messages SET (
    vacuum_index_cleanup = on,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000
);
