-- drainpipe: the record of applied migrations (sql/migrations/<module>/NNNN_<name>).
-- One row per module and migration number; the checksum is the SHA-256 of the migration's
-- text as applied with the module's options, so `drainpipe sql verify` can tell an applied
-- migration from one that was changed (or applied with other options) since.
CREATE TABLE IF NOT EXISTS drainpipe.schema_migrations (
    module text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (module, version)
);
ALTER TABLE drainpipe.schema_migrations ENABLE ROW LEVEL SECURITY;
