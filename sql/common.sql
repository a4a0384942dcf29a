-- drainpipe: the schema every module lives in, and the record of what is installed.
CREATE SCHEMA IF NOT EXISTS drainpipe;

-- Which module is installed with which options; install() skips a module whose
-- rendered SQL has not changed (checksum), so cold starts that call install() stay cheap.
CREATE TABLE IF NOT EXISTS drainpipe.modules (
    name text PRIMARY KEY,
    options jsonb NOT NULL DEFAULT '{}',
    checksum text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE drainpipe.modules ENABLE ROW LEVEL SECURITY;
