-- The record listing's plan. drainpipe.job_records_at (0004) is one SQL-language statement
-- with optional filters written as `(p_x IS NULL OR ...)`; a SQL function that is not
-- inlined is planned once for every combination of filters, so that plan cannot know
-- which filters are absent: at 100,000 jobs it read every row and sorted them (a seq scan
-- and a top-N sort, ~60 ms for a page of 500). The same statement run by plpgsql under
-- plan_cache_mode = force_custom_plan is planned for each call's own arguments: without
-- filters (or with a queue or a cursor) it walks the primary key backwards and stops after
-- the page (~2 ms). The statement is taken from the catalog rather than repeated here, so
-- it stays exactly what the records migration defines (re-applied after it, see sql.md).
DO $plan$
DECLARE
    v_fn oid := to_regprocedure(
        'drainpipe.job_records_at(text, text, text, integer, bigint, bigint, timestamptz)');
    v_definition text;
    v_parts text[];
BEGIN
    IF v_fn IS NULL
       OR (SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = v_fn) <> 'sql' THEN
        RETURN;  -- not there, or already a plpgsql function that plans per call
    END IF;
    v_definition := pg_get_functiondef(v_fn);
    v_parts := string_to_array(v_definition, '$function$');
    IF array_length(v_parts, 1) <> 3 THEN
        RAISE EXCEPTION 'unexpected definition of drainpipe.job_records_at';
    END IF;
    EXECUTE replace(
                replace(v_parts[1], 'LANGUAGE sql', 'LANGUAGE plpgsql'),
                ' SET search_path', ' SET plan_cache_mode TO ''force_custom_plan''' || chr(10) || ' SET search_path')
            || '$function$' || chr(10)
            -- the output columns share names with the statement's own columns
            || '#variable_conflict use_column' || chr(10)
            || 'BEGIN' || chr(10) || 'RETURN QUERY ' || rtrim(btrim(v_parts[2], E' \n\r\t'), ';') || chr(10) || ';' || chr(10)
            || 'END' || chr(10) || '$function$' || v_parts[3];
END
$plan$;
