-- CONTRACT, pg_cron: the jobs release 0 scheduled call drainpipe.enqueue_job, which is
-- about to go; point them at enqueue_job_v1 (same arguments) first.
DO $commands$
DECLARE
    v_job record;
BEGIN
    IF NOT drainpipe.has_pg_cron() THEN
        RETURN;
    END IF;
    FOR v_job IN EXECUTE
        'SELECT jobid, command FROM cron.job WHERE starts_with(command, ''SELECT drainpipe.enqueue_job('')'
    LOOP
        EXECUTE 'SELECT cron.alter_job(job_id => $1, command => $2)'
          USING v_job.jobid,
                'SELECT drainpipe.enqueue_job_v1(' || substr(v_job.command, length('SELECT drainpipe.enqueue_job(') + 1);
    END LOOP;
END
$commands$;
