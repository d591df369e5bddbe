"""The source's DDL event trigger (``source.ddl_events``): what WAL does not say about ALTER TABLE.

``ALTER TABLE t ADD COLUMN c ... DEFAULT <non-volatile>`` writes no WAL for the
rows already there: they read the column's *missing value*
(``pg_attribute.attmissingval``). At ``ddl_command_end`` of every ALTER TABLE
the trigger emits, in the altering transaction, a transactional logical
decoding message ``cdc_apply.column_defaults`` with the text of each column's
missing value (the output function's text under the walsender's settings),
which the apply gives to the silver rows older than the column
(docs/SNAPSHOTS.md). A rewrite (a volatile default, a type change) changes
every row without a change in WAL: at ``table_rewrite`` the trigger emits a
transactional ``cdc_apply.snapshot_request`` for the table, and the lander
copies it again once that transaction has committed.

The trigger raises when it cannot emit (the ALTER TABLE then fails): a
default silently missing from silver would be wrong data.
"""

from __future__ import annotations

from cdc_apply.errors import LandError

VERSION_MARK = "cdc_apply ddl events 1"

# Each element's text: cast the one-element array's text to an array of the column's type and print the
# element with format('%s') (its output function); an array column's element is itself an array whose text
# the text[] parser reads back exactly.
DDL_EVENTS_SQL = f"""
CREATE SCHEMA IF NOT EXISTS cdc_apply;

CREATE OR REPLACE FUNCTION cdc_apply.column_defaults(target oid) RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog
    SET "DateStyle" = 'ISO, MDY' SET "TimeZone" = 'UTC' SET "IntervalStyle" = 'postgres'
    SET extra_float_digits = 3 SET bytea_output = 'hex'
AS $fn$
-- {VERSION_MARK}
DECLARE
    col record;
    value text;
    columns jsonb := '{{}}'::jsonb;
BEGIN
    FOR col IN SELECT a.attname, a.attmissingval::text AS missing, t.typarray, t.typcategory
               FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
               WHERE a.attrelid = target AND a.atthasmissing AND NOT a.attisdropped ORDER BY a.attnum
    LOOP
        IF col.typcategory = 'A' OR col.typarray = 0 THEN
            value := (col.missing::text[])[1];
        ELSE
            EXECUTE format('SELECT format(%L, ($1::%s)[1])', '%s', col.typarray::regtype) INTO value USING col.missing;
        END IF;
        IF value IS NOT NULL THEN
            columns := columns || jsonb_build_object(col.attname, value);
        END IF;
    END LOOP;
    RETURN columns;
END
$fn$;

CREATE OR REPLACE FUNCTION cdc_apply.report_column_defaults() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog
AS $fn$
-- {VERSION_MARK}
DECLARE
    altered oid;
    part record;
    columns jsonb;
    inherited jsonb;
BEGIN
    FOR altered IN SELECT DISTINCT c.objid FROM pg_event_trigger_ddl_commands() c
                   WHERE c.classid = 'pg_class'::regclass AND c.command_tag = 'ALTER TABLE'
    LOOP
        inherited := NULL;
        -- A partitioned table has no rows of its own: its partitions hold the missing values, and a
        -- publication via the root names the root.
        FOR part IN SELECT t.relid::oid AS relid, t.isleaf, t.level FROM pg_partition_tree(altered) t
                    UNION ALL SELECT altered, true, 0 WHERE NOT EXISTS (SELECT FROM pg_partition_tree(altered))
                    ORDER BY 3 DESC
        LOOP
            columns := cdc_apply.column_defaults(part.relid);
            IF NOT part.isleaf AND columns = '{{}}'::jsonb THEN
                columns := coalesce(inherited, columns);
            END IF;
            IF columns <> '{{}}'::jsonb THEN
                inherited := coalesce(inherited, columns);
                PERFORM pg_logical_emit_message(true, 'cdc_apply.column_defaults',
                    jsonb_build_object('relation_id', part.relid::int8, 'columns', columns)::text);
            END IF;
        END LOOP;
    END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION cdc_apply.request_snapshot_on_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SET search_path = pg_catalog
AS $fn$
-- {VERSION_MARK}
BEGIN
    PERFORM pg_logical_emit_message(true, 'cdc_apply.snapshot_request',
        jsonb_build_object('relation_ids', jsonb_build_array(pg_event_trigger_table_rewrite_oid()::int8),
                           'reason', 'table_rewrite')::text);
END
$fn$;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'cdc_apply_column_defaults') THEN
        CREATE EVENT TRIGGER cdc_apply_column_defaults ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
            EXECUTE FUNCTION cdc_apply.report_column_defaults();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'cdc_apply_table_rewrite') THEN
        CREATE EVENT TRIGGER cdc_apply_table_rewrite ON table_rewrite WHEN TAG IN ('ALTER TABLE', 'ALTER TYPE')
            EXECUTE FUNCTION cdc_apply.request_snapshot_on_rewrite();
    END IF;
END
$do$;
"""

_INSTALLED = """
SELECT count(*) FROM pg_event_trigger e JOIN pg_proc p ON p.oid = e.evtfoid
WHERE e.evtname IN ('cdc_apply_column_defaults', 'cdc_apply_table_rewrite') AND e.evtenabled <> 'D'
  AND p.prosrc LIKE %s
"""


def installed(server) -> bool:
    """Whether both event triggers of this version are there and enabled."""
    return int(server.query(_INSTALLED, (f"%{VERSION_MARK}%",))[0][0]) == 2


def install(server, config_hint: str = "FILE") -> bool:
    """Install the event triggers unless they are there (idempotent); returns whether anything was done.

    Event triggers need a superuser: without one, a LandError says what to run."""
    if installed(server):
        return False
    user, superuser = server.query("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")[0]
    if not superuser:
        raise LandError(f"source.ddl_events needs the cdc_apply event triggers, and user {user!r} may not create "
                        f"event triggers: as a superuser, run the SQL that `cdc-apply snapshot --config "
                        f"{config_hint} --ddl-events-sql` prints (e.g. piped into psql), or set "
                        "source.ddl_events = false", key="source.ddl_events")
    with server.cursor() as cur:
        cur.execute(DDL_EVENTS_SQL)     # no parameters: the script's own % signs stay as they are
    return True
