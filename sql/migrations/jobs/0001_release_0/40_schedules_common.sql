-- jobs: what both schedulers (drain and pg_cron) share.

-- The shape SQL can check without a cron parser: a macro, an interval or five fields.
-- Field values are checked by Python (drainpipe.cron); a row that passes here but not
-- there is skipped by every drain and keeps next_run null.
CREATE OR REPLACE FUNCTION drainpipe.assert_schedule_form(p_cron text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := lower(btrim(coalesce(p_cron, ''), E' \t\r\n'));
BEGIN
    IF v_text ~ '^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$' THEN
        RETURN;
    END IF;
    IF v_text ~ '^[0-9]+\s+(second|minute|hour)s?$' THEN
        IF substring(v_text FROM '^([0-9]+)')::numeric < 1 THEN
            RAISE EXCEPTION 'Invalid schedule %: the interval must be positive', p_cron USING ERRCODE = '22023';
        END IF;
        RETURN;
    END IF;
    IF v_text ~ '^\S+(\s+\S+){4}$' THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'Invalid schedule %: expected five cron fields, a macro such as @daily, or an interval such as 5 minutes', p_cron
        USING ERRCODE = '22023';
END
$$;

-- claim_due_schedules now returns the claim token; the old advance took none
DROP FUNCTION IF EXISTS drainpipe.advance_schedule(text, timestamptz, timestamptz);
DO $drop_old_claim$
BEGIN
    IF to_regprocedure('drainpipe.claim_due_schedules(double precision, integer)') IS NOT NULL
       AND pg_get_function_result(to_regprocedure('drainpipe.claim_due_schedules(double precision, integer)'))
           NOT LIKE '%claim_token%' THEN
        DROP FUNCTION drainpipe.claim_due_schedules(double precision, integer);
    END IF;
END
$drop_old_claim$;
