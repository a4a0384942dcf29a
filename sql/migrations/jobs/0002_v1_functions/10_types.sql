-- jobs v1: the row types the _v1 functions return, declared once for both backends and
-- both schedulers. A changed shape is a new type (_v2) beside this one, never an ALTER:
-- code of the previous release reads these columns during a rolling deploy.
DO $types$
BEGIN
    IF to_regtype('drainpipe.job_row_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_row_v1 AS (
            id bigint, attempts integer, enqueued_at timestamptz, visible_until timestamptz,
            payload jsonb, max_attempts integer, last_error text
        );
    END IF;
    IF to_regtype('drainpipe.job_queue_stats_v1') IS NULL THEN
        CREATE TYPE drainpipe.job_queue_stats_v1 AS (
            queue text, ready bigint, in_flight bigint, delayed bigint, dead bigint,
            oldest_age_seconds double precision
        );
    END IF;
    IF to_regtype('drainpipe.dead_job_v1') IS NULL THEN
        CREATE TYPE drainpipe.dead_job_v1 AS (
            id bigint, attempts integer, enqueued_at timestamptz, died_at timestamptz, message jsonb
        );
    END IF;
    IF to_regtype('drainpipe.schedule_claim_v1') IS NULL THEN
        CREATE TYPE drainpipe.schedule_claim_v1 AS (
            name text, cron text, time_zone text, queue text, payload jsonb, next_run timestamptz,
            first_after timestamptz, claim_token uuid
        );
    END IF;
    IF to_regtype('drainpipe.schedule_entry_v1') IS NULL THEN
        CREATE TYPE drainpipe.schedule_entry_v1 AS (
            name text, cron text, time_zone text, queue text, tenant text, next_run timestamptz,
            last_run timestamptz, leased_until timestamptz, created_at timestamptz
        );
    END IF;
END
$types$;
