-- CONTRACT (applied only with install(..., contract=True) / `drainpipe sql apply
-- --contract`): drops release 0's unversioned functions once no code of that release runs.
DROP FUNCTION IF EXISTS drainpipe.receive_webhook(text, text, text, jsonb, jsonb, text, integer);
DROP FUNCTION IF EXISTS drainpipe.claim_webhooks(text, text, integer, double precision);
DROP FUNCTION IF EXISTS drainpipe.complete_webhook(bigint, text, integer);
DROP FUNCTION IF EXISTS drainpipe.fail_webhook(bigint, text, integer, text, double precision);
DROP FUNCTION IF EXISTS drainpipe.checkpoint_webhook(bigint, text, integer, jsonb);
DROP FUNCTION IF EXISTS drainpipe.extend_webhook(bigint, text, integer, double precision);
DROP FUNCTION IF EXISTS drainpipe.extend_webhooks(bigint[], integer[], text, double precision);
DROP FUNCTION IF EXISTS drainpipe.list_webhooks(text, text, text, integer);
DROP FUNCTION IF EXISTS drainpipe.purge_webhooks(double precision, boolean, integer, text, text);
