-- CONTRACT (applied only with install(..., contract=True) / `drainpipe sql apply
-- --contract`): drops release 0's unversioned functions once no code of that release runs.
DROP FUNCTION IF EXISTS drainpipe.begin_idempotent(text, text, text, double precision, double precision);
DROP FUNCTION IF EXISTS drainpipe.complete_idempotent(text, text, uuid, integer, bytea, text);
DROP FUNCTION IF EXISTS drainpipe.release_idempotent(text, text, uuid);
DROP FUNCTION IF EXISTS drainpipe.purge_idempotency_keys(integer);
DROP FUNCTION IF EXISTS drainpipe.acquire_lease(text, double precision, text);
DROP FUNCTION IF EXISTS drainpipe.extend_lease(text, uuid, double precision, text);
DROP FUNCTION IF EXISTS drainpipe.release_lease(text, uuid, text);
