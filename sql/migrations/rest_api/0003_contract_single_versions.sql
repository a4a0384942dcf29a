-- drainpipe's rest-api module: one version per function; the client calls replay_v3 and
-- retry_dead_v2 (and reads their codes), nothing calls these any more.
DROP FUNCTION IF EXISTS drainpipe_api.replay_v2(text, bigint);
DROP FUNCTION IF EXISTS drainpipe_api.retry_dead_v1(text, bigint[], integer);

-- PostgREST reads its schema cache once; tell a running one that the functions changed
NOTIFY pgrst, 'reload schema';
