"""``silver.readers = "delta-rs"`` on a real PostgreSQL 18 capture: silver and history tables made without
column mapping, type widening and deletion vectors, which delta-rs (``deltalake``) and polars open (and
DuckDB, which also opens silver as made by default).

One lake, seven batches: the initial snapshot; inserts, updates and deletes (soft in ``s``); then a column
of ``k`` added, renamed, dropped, widened (int to bigint) and retyped incompatibly (text to int), each with
a change after it; both tables keep history tables. After every batch, deltalake, polars and DuckDB read every
silver and history table as Spark reads it, and silver (read as the pipeline's readers read it)
equals PostgreSQL. Other lakes: a chain of schema changes in one batch crashed between its commits, a
column name Delta cannot hold without column mapping, and a table made before the setting.
"""

from __future__ import annotations

import io
import logging
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from pg_lake import PgLake

from cdc_apply.config.choices import Readers
from cdc_apply.delta.engine import spark_tables
from cdc_apply.errors import SchemaError

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

READERS = {"silver": {"readers": "delta-rs", "soft_deletes": ["public.s"], "history": ["public.*"]}}
SETUP = [
    "CREATE TABLE k (id int PRIMARY KEY, v text, n int, d text, c text)",
    "CREATE TABLE s (id int PRIMARY KEY, v text)",
    "INSERT INTO k SELECT g, 'v' || g, g * 10, 'd' || g, (g * 7)::text FROM generate_series(1, 4) g",
    "INSERT INTO s SELECT g, 's' || g FROM generate_series(1, 3) g",
]
STEPS = [
    ("snapshot", []),
    ("changes", ["INSERT INTO k VALUES (5, 'v5', 50, 'd5', '35')", "UPDATE k SET v = 'one' WHERE id = 1",
                 "DELETE FROM k WHERE id = 2", "DELETE FROM s WHERE id = 2", "UPDATE s SET v = 'three' WHERE id = 3"]),
    ("add", ["ALTER TABLE k ADD COLUMN e text", "UPDATE k SET e = 'e' || id WHERE id > 3"]),
    ("rename", ["ALTER TABLE k RENAME COLUMN v TO w", "UPDATE k SET w = 'renamed' WHERE id = 3"]),
    ("drop", ["ALTER TABLE k DROP COLUMN d", "INSERT INTO k (id, w, n, c, e) VALUES (6, 'v6', 60, '42', 'e6')"]),
    ("widen", ["ALTER TABLE k ALTER COLUMN n TYPE bigint", "UPDATE k SET n = 5000000000 WHERE id = 4"]),
    ("retype", ["ALTER TABLE k ALTER COLUMN c TYPE int USING c::int", "UPDATE k SET c = c + 1 WHERE id = 1",
                "DELETE FROM s WHERE id = 1"]),
]


def _plain(value):
    """A value as Spark's UTC session gives it (pyarrow and polars give timestamps with their zone)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def _sorted(rows) -> list[tuple]:
    return sorted((tuple(sorted((k, _plain(v)) for k, v in row.items())) for row in rows), key=repr)


def duckdb_rows(path: str, leave_out: tuple[str, ...] = ()) -> list[tuple]:
    """The table at ``path`` as DuckDB's ``delta`` extension reads it (less the columns ``leave_out``): the
    extension's file from the ``duckdb-ext-delta`` package, loaded from disk (nothing downloaded)."""
    import glob
    import os

    import duckdb

    here = os.path.dirname(os.path.dirname(duckdb.__file__))
    (extension,) = glob.glob(os.path.join(here, "duckdb_ext", "extensions", "*", "*", "delta.duckdb_extension"))
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        con.execute(f"LOAD '{extension}'")
        rows = con.execute(f"SELECT * FROM delta_scan('{path}')").fetch_arrow_table().to_pylist()
        return _sorted({k: v for k, v in row.items() if k not in leave_out} for row in rows)
    finally:
        con.close()


def _reads(spark, path: str) -> tuple[list, list, list, object, list]:
    """The table at ``path`` as Spark, deltalake and polars read it, the protocol deltalake sees, and DuckDB's
    read."""
    import polars
    from deltalake import DeltaTable

    spark_rows = _sorted(r.asDict() for r in spark.read.format("delta").load(path).collect())
    table = DeltaTable(path)
    return spark_rows, _sorted(table.to_pyarrow_table().to_pylist()), _sorted(polars.read_delta(path).to_dicts()), \
        table.protocol(), duckdb_rows(path)


@pytest.fixture(scope="module")
def readers(postgres, spark, tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("readers"), "readers", SETUP, READERS)
    paths = {"k": f"{lake.config.silver.path}/public/k", "s": f"{lake.config.silver.path}/public/s",
             "k history": f"{lake.config.silver.path}{lake.config.silver.history_suffix}/public/k",
             "s history": f"{lake.config.silver.path}{lake.config.silver.history_suffix}/public/s"}
    seen = {}
    history = None
    for step, statements in STEPS:
        if statements:
            lake.run(*statements)
        lake.land_and_apply()
        seen[step] = ({name: _reads(spark, path) for name, path in paths.items()}, lake.silver_differences())
        if step == "widen":
            # Before the incompatible retype: after it every version holds the new type (docs/HISTORY.md,
            # "as silver"), where the states recorded before it hold PostgreSQL's text.
            history = lake.history_differences()
    yield lake, seen, paths, history
    lake.close()


def test_silver_and_history_tables_are_made_without_reader_features(readers):
    _, seen, _, _ = readers
    for step, (tables, _) in seen.items():
        for name, (_, _, _, protocol, _) in tables.items():
            assert (protocol.min_reader_version, protocol.reader_features) == (1, None), (step, name, protocol)


def test_deltalake_reads_every_table_as_spark_reads_it_after_every_batch(readers):
    _, seen, _, _ = readers
    for step, (tables, _) in seen.items():
        for name, (spark_rows, rs_rows, _, _, _) in tables.items():
            assert spark_rows and rs_rows == spark_rows, (step, name)


def test_polars_reads_every_table_as_spark_reads_it_after_every_batch(readers):
    _, seen, _, _ = readers
    for step, (tables, _) in seen.items():
        for name, (spark_rows, _, polars_rows, _, _) in tables.items():
            assert polars_rows == spark_rows, (step, name)


def test_duckdb_reads_every_table_as_spark_reads_it_after_every_batch(readers):
    _, seen, _, _ = readers
    for step, (tables, _) in seen.items():
        for name, (spark_rows, _, _, _, duck_rows) in tables.items():
            assert duck_rows == spark_rows, (step, name)


@pytest.mark.system
def test_duckdb_reads_default_silver_with_its_reader_features_as_spark_reads_it_after_every_batch(
        postgres, spark, tmp_path):
    """Silver as made by default (column mapping, type widening, deletion vectors), after the same seven
    batches: DuckDB's ``delta`` extension reads every silver and history table as Spark does — but a history
    table's partition column ``_cdc_is_current``, which DuckDB 1.4.4's extension reads as NULL from a table
    with column mapping (README's readers row says so)."""
    lake = PgLake(postgres, spark, tmp_path, "readers_spark", SETUP,
                  {"silver": {"soft_deletes": ["public.s"], "history": ["public.*"]}})
    paths = [f"{lake.config.silver.path}{suffix}/public/{t}" for suffix in ("", lake.config.silver.history_suffix)
             for t in ("k", "s")]
    try:
        for step, statements in STEPS:
            if statements:
                lake.run(*statements)
            lake.land_and_apply()
            for path in paths:
                leave_out = ("_cdc_is_current",) if lake.config.silver.history_suffix in path else ()
                spark_rows = _sorted({k: v for k, v in r.asDict().items() if k not in leave_out}
                                     for r in spark.read.format("delta").load(path).collect())
                assert spark_rows and duckdb_rows(path, leave_out) == spark_rows, (step, path)
        assert lake.silver_differences() == []
    finally:
        lake.close()


def test_silver_equals_postgres_after_every_batch(readers):
    _, seen, _, _ = readers
    assert {step: differences for step, (_, differences) in seen.items()} == {step: [] for step, _ in STEPS}


def test_silver_ends_with_the_columns_and_types_postgres_ends_with(readers):
    from deltalake import DeltaTable

    _, _, paths, _ = readers
    fields = {f.name: f.type.type for f in DeltaTable(paths["k"]).schema().fields}
    assert [name for name in fields if not name.startswith("_cdc_")] == ["id", "w", "n", "c", "e"]
    assert (fields["n"], fields["c"]) == ("long", "integer")


def test_the_rewrites_keep_the_history_tables_partitioning_and_silvers_properties(readers):
    from deltalake import DeltaTable

    _, _, paths, _ = readers
    assert DeltaTable(paths["k history"]).metadata().partition_columns == ["_cdc_is_current"]
    configuration = DeltaTable(paths["k"]).metadata().configuration
    assert (configuration["delta.enableChangeDataFeed"], configuration["cdc_apply.relation"]) == ("true", "public.k")


def test_soft_deleted_rows_stay_in_silver_marked_for_every_reader(readers):
    _, seen, _, _ = readers
    _, rs_rows, _, _, duck_rows = seen["retype"][0]["s"]
    assert duck_rows == rs_rows
    marks = {dict(row)["id"]: dict(row)["_cdc_deleted"] for row in rs_rows}
    assert marks == {1: True, 2: True, 3: False}


def test_the_history_table_holds_every_state_postgres_went_through_a_rename_a_drop_and_a_widening(readers):
    assert readers[3] == []


def test_a_rename_a_drop_and_a_retype_each_rewrite_the_table_in_one_commit(readers):
    lake, _, paths, _ = readers
    writes = [r for r in lake.spark.sql(f"DESCRIBE HISTORY delta.`{paths['k']}`").collect()
              if r.userMetadata and "schema_chain" in r.userMetadata]
    assert sorted(r.operation for r in writes) == ["ADD COLUMNS", "WRITE", "WRITE", "WRITE", "WRITE"]
    assert all(r.operationParameters.get("mode") == "Overwrite" for r in writes if r.operation == "WRITE")


# A chain of schema changes in one batch, crashed between its commits --------------------------------------

CHAIN_SETUP = ["CREATE TABLE t (id int PRIMARY KEY, a text, b int, gone text)",
               "INSERT INTO t SELECT g, 'a' || g, g, 'x' FROM generate_series(1, 3) g"]
# No retype here: PostgreSQL rewrites a retyped table, and with ddl_events the lander then copies it again
# (a snapshot replaces silver's rows, so no fill follows). The rename, the drop and the add are one rewrite
# of silver; the fill of the added column's default the second commit. (f is not text: a dropped last column
# and an added one of its type read as a rename, README "Features and limits".)
CHAIN = ["ALTER TABLE t RENAME COLUMN a TO a2", "ALTER TABLE t DROP COLUMN gone",
         "ALTER TABLE t ADD COLUMN f int DEFAULT 5", "UPDATE t SET b = 20 WHERE id = 2"]


class Crash(RuntimeError):
    pass


def _chain_steps(lake) -> list[int]:
    """The schema steps silver's commits record (the chain's tag, :mod:`cdc_apply.lake.books.commit_tag`)."""
    from cdc_apply.lake.books.commit_tag import decode_tag

    path = f"{lake.config.silver.path}/public/t"
    tags = [decode_tag(r.userMetadata) for r in lake.spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
    return sorted(int(tag["step"]) for tag in tags if tag is not None and "schema_chain" in tag)


def test_a_schema_chain_crashed_between_its_commits_lands_every_step_once_on_the_rerun(postgres, spark,
                                                                                       tmp_path_factory):
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.lander.lander import Lander

    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("readers_chain"), "readers_chain", CHAIN_SETUP,
                  READERS, ddl_events=True)
    try:
        lake.land_and_apply()
        lake.run(*CHAIN)
        Lander(lake.lander_config, spark, out=io.StringIO()).run(once=True)

        def crash(point: str) -> None:
            if point == "schema:public.t:0":   # the rewrite committed, the fill of f not yet
                raise Crash(f"injected crash at {point}")

        with pytest.raises(Exception, match="injected crash"):   # the batch names the table it stopped in
            ApplyPipeline.open(spark_tables(spark), lake.config, out=io.StringIO(), fault_hook=crash).run(once=True)
        assert _chain_steps(lake) == [0]
        lake.apply()
        assert _chain_steps(lake) == [0, 1]   # the rewrite and the fill of f, each once
        assert lake.silver_differences() == []
        spark_rows, rs_rows, polars_rows, _, duck_rows = _reads(spark, f"{lake.config.silver.path}/public/t")
        assert rs_rows == polars_rows == duck_rows == spark_rows
        assert {dict(r)["id"]: (dict(r)["a2"], dict(r)["b"], dict(r)["f"]) for r in rs_rows} == {
            1: ("a1", 1, 5), 2: ("a2", 20, 5), 3: ("a3", 3, 5)}
    finally:
        lake.close()


# Names and tables the setting cannot take as they are --------------------------------------------------------

def test_a_column_name_delta_cannot_hold_without_column_mapping_stops_the_batch_naming_it(postgres, spark,
                                                                                        tmp_path_factory):
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("readers_names"), "readers_names",
                  ['CREATE TABLE odd (id int PRIMARY KEY, "unit price" int)', "INSERT INTO odd VALUES (1, 2)"],
                  READERS)
    try:
        with pytest.raises(SchemaError) as raised:
            lake.land_and_apply()
        text = str(raised.value)
        assert "'unit price'" in text and "public.odd" in text and "silver.readers" in text
        assert not (Path(lake.config.silver.path) / "public" / "odd").exists()
    finally:
        lake.close()


def test_a_table_made_with_reader_features_keeps_them_under_the_setting_and_is_named_in_a_warning(
        postgres, spark, tmp_path_factory, caplog):
    from deltalake import DeltaTable

    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("readers_old"), "readers_old",
                  ["CREATE TABLE old (id int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'one')"])
    try:
        lake.land_and_apply()
        lake.config = replace(lake.config, silver=replace(lake.config.silver, readers=Readers.DELTA_RS))
        lake.run("ALTER TABLE old RENAME COLUMN v TO w", "UPDATE old SET w = 'uno'")
        with caplog.at_level(logging.WARNING, logger="cdc_apply.apply"):
            lake.land_and_apply()
        assert lake.silver_differences() == []
        warned = [r.getMessage() for r in caplog.records if "reader features" in r.getMessage()]
        assert len(warned) == 1 and "public.old" in warned[0] and "columnMapping" in warned[0]
        protocol = DeltaTable(f"{lake.config.silver.path}/public/old").protocol()
        assert "columnMapping" in (protocol.reader_features or [])
    finally:
        lake.close()
