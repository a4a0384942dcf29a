-- drainpipe's webhook inbox: one version of the receive; receive_webhook_v3 takes the same
-- arguments and the raw body last (default NULL), so every caller moved to it.
DROP FUNCTION IF EXISTS drainpipe.receive_webhook_v2(text, text, text, jsonb, jsonb, text, integer, text, boolean);
