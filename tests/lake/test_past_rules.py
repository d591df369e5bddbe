"""Column rules added to tables that already have rows (``cdc_apply.lake.silver.past_rules``), on a real
PostgreSQL 18: a table applied in clear (with a history table) and a table keyed by an e-mail; then the
configuration gains a hash of a text column, a hash of an integer column, a redaction, an exclusion and a
hash of the key. The next batch masks and drops in silver and history before its own writes; a job killed
between those steps and run again masks exactly once; time travel to before still reads the clear values."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import replace

import pytest
from pg_lake import PgLake

from cdc_apply.config import TableConfig
from cdc_apply.delta.engine import spark_tables

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SALT = "salt-of-the-past-rules-test"
SETUP = [
    "CREATE TABLE people (id int PRIMARY KEY, email text, ssn text, pw text, age int, n int)",
    "INSERT INTO people VALUES (1, 'alice@example.com', '123-45', 'hunter2', 41, 1), "
    "(2, NULL, '999-99', 'pw-two', NULL, 2), (3, 'carol@example.com', NULL, NULL, 30, 3)",
    "CREATE TABLE accounts (email text PRIMARY KEY, n int)",
    "INSERT INTO accounts VALUES ('bob@example.com', 1), ('dave@example.com', 2)",
]
HISTORY = {"silver": {"history": ["public.people"]}}
RULES = {"public.people": TableConfig(exclude_columns=("pw",), mask_columns=(
             ("email", "sha256"), ("ssn", "redact"), ("age", "sha256"))),
         "public.accounts": TableConfig(mask_columns=(("email", "sha256"),))}
CHANGES = ("UPDATE people SET n = 10 WHERE id = 1",
           "INSERT INTO people VALUES (4, 'erin@example.com', '4', 'x', 5, 4)",
           "UPDATE accounts SET n = 7 WHERE email = 'bob@example.com'",
           "DELETE FROM accounts WHERE email = 'dave@example.com'")


def _hash(value: object) -> str:
    return hashlib.sha256((SALT + str(value)).encode()).hexdigest()


class Crash(RuntimeError):
    pass


def _apply_crashing_at(lake: PgLake, point: str) -> None:
    from cdc_apply.lake.pipeline import ApplyPipeline

    def hook(at):
        if at == point:
            raise Crash(f"injected crash at {at}")

    with pytest.raises(Exception, match="injected crash"):   # the table's thread names its table around it
        ApplyPipeline.open(spark_tables(lake.spark), lake.config, out=io.StringIO(), fault_hook=hook).run(once=True)


def _lake(postgres, spark, root, name: str) -> PgLake:
    """A lake whose tables were applied in clear; its configuration then gains the rules."""
    lake = PgLake(postgres, spark, root, name, SETUP, HISTORY)
    lake.land_and_apply()
    lake.config = replace(lake.config, tables=RULES)
    lake.run(*CHANGES)
    return lake


@pytest.fixture(scope="module")
def salted():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CDC_APPLY_MASK_SALT", SALT)
        yield


@pytest.fixture(scope="module")
def later(postgres, spark, tmp_path_factory, salted):
    """The rules added between two batches, no crash: (lake, what the second batch printed)."""
    lake = _lake(postgres, spark, tmp_path_factory.mktemp("past_rules"), "past_rules")
    printed = lake.land_and_apply()
    yield lake, printed
    lake.close()


@pytest.fixture(scope="module")
def from_start(postgres, spark, tmp_path_factory, salted):
    """The same database and changes applied by a pipeline that had the rules from its first batch."""
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("past_rules_start"), "past_rules_start", SETUP, HISTORY)
    lake.config = replace(lake.config, tables=RULES)
    lake.land_and_apply()
    lake.run(*CHANGES)
    lake.land_and_apply()
    yield lake
    lake.close()


def _silver(lake, table):
    return lake.spark.read.format("delta").load(f"{lake.config.silver.path}/public/{table}")


def _history(lake):
    return lake.spark.read.format("delta").load(f"{lake.config.silver.path}_history/public/people")


def test_silver_then_equals_postgresql_under_the_rules_as_a_pipeline_with_them_from_the_start(later):
    lake, _ = later
    assert lake.silver_differences() == []


def test_silver_and_history_hold_the_values_a_pipeline_with_the_rules_from_the_start_holds(later, from_start):
    lake, _ = later
    people = ("id", "email", "ssn", "age", "n")
    for table, columns in (("people", people), ("accounts", ("email", "n"))):
        got, want = (sorted(tuple(r) for r in _silver(x, table).select(*columns).collect()) for x in (lake, from_start))
        assert got == want and got
    versions = (*people, "_cdc_operation", "_cdc_is_current")
    got, want = (sorted(tuple(r) for r in _history(x).select(*versions).collect()) for x in (lake, from_start))
    assert got == want and len(got) == 5
    assert sorted(_silver(lake, "people").columns) == sorted(_silver(from_start, "people").columns)


def test_the_history_table_holds_every_earlier_state_masked_as_if_the_rules_were_there_from_the_start(later):
    lake, _ = later
    assert [d for d in lake.history_differences() if "public.people" in d] == []


def test_each_mask_kind_rewrites_the_values_silver_held_in_clear(later):
    lake, _ = later
    rows = {r.id: r for r in _silver(lake, "people").collect()}
    assert (rows[1].email, rows[1].ssn, rows[1].age, rows[1].n) == (
        _hash("alice@example.com"), "REDACTED", _hash(41), 10)
    assert (rows[2].email, rows[2].ssn, rows[2].age) == (None, "REDACTED", None)   # NULL stays NULL
    assert (rows[3].email, rows[3].ssn, rows[3].age) == (_hash("carol@example.com"), None, _hash(30))
    assert dict(_silver(lake, "people").dtypes)["age"] == "string"


def test_an_excluded_column_is_dropped_from_silver_and_history(later):
    lake, _ = later
    assert "pw" not in _silver(lake, "people").columns and "pw" not in _history(lake).columns


def test_a_hashed_key_is_rewritten_and_later_changes_still_find_their_rows(later):
    lake, _ = later
    assert sorted(tuple(r) for r in _silver(lake, "accounts").select("email", "n").collect()) == [
        (_hash("bob@example.com"), 7)]


def test_every_history_version_is_masked(later):
    lake, _ = later
    versions = _history(lake).where("id = 1").select("email", "ssn", "age", "n").collect()
    assert sorted(tuple(r) for r in versions) == [
        (_hash("alice@example.com"), "REDACTED", _hash(41), n) for n in (1, 10)]


def test_the_run_says_once_per_table_what_it_masked_and_what_time_travel_still_reads(later):
    _, printed = later
    people = [line for line in printed.splitlines() if "public.people" in line and "VACUUM" in line]
    assert len(people) == 1
    assert "masked (sha256) public.people.email: 2 rows in silver and 2 versions in history" in people[0]
    assert "masked (redact) public.people.ssn: 2 rows in silver" in people[0]
    assert "dropped the excluded column public.people.pw in silver and history" in people[0]
    assert "retention interval 1 week" in people[0]
    assert len([line for line in printed.splitlines() if "public.accounts.email" in line]) == 1


def test_the_tables_record_the_rules_their_values_reflect(later, spark):
    lake, _ = later
    for path in (f"{lake.config.silver.path}/public/people", f"{lake.config.silver.path}_history/public/people"):
        props = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
        applied = json.loads(props["cdc_apply.masks_applied"])
        assert sorted(applied.values()) == ["exclude", "redact", "sha256", "sha256"]


def test_time_travel_to_the_version_before_still_reads_the_clear_values(later, spark):
    """Documented (docs/MASKING.md): earlier Delta versions hold the clear values until VACUUM."""
    lake, _ = later
    path = f"{lake.config.silver.path}/public/people"
    masking = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(
        "operation = 'UPDATE' AND userMetadata LIKE '%masks_applied%'").collect()
    assert len(masking) == 1
    before = spark.read.format("delta").option("versionAsOf", masking[0].version - 1).load(path)
    assert before.where("id = 1").select("email", "pw").first() == ("alice@example.com", "hunter2")


def test_a_later_batch_masks_nothing_again(later):
    lake, _ = later
    lake.run("UPDATE people SET n = 11 WHERE id = 3")
    printed = lake.land_and_apply()
    assert "VACUUM" not in printed
    assert lake.silver_differences() == []
    assert _silver(lake, "people").where("id = 1").first().email == _hash("alice@example.com")


@pytest.mark.parametrize("point", ["past-rules:silver:updated:public.people", "past-rules:silver:dropped:public.people",
                                   "past-rules:history:updated:public.people"])
def test_a_job_killed_between_the_steps_masks_exactly_once_when_run_again(postgres, spark, tmp_path, salted, point):
    from cdc_apply.lander.lander import Lander

    name = "past_rules_" + "_".join(point.split(":")[1:3])
    lake = _lake(postgres, spark, tmp_path, name)
    try:
        Lander(lake.lander_config, spark, out=io.StringIO()).run(once=True)
        _apply_crashing_at(lake, point)
        lake.apply()
        assert lake.silver_differences() == []   # a hash of a hash, or a clear value, would differ
        assert [d for d in lake.history_differences() if "public.people" in d] == []
        assert _silver(lake, "people").where("id = 1").first().age == _hash(41)
    finally:
        lake.close()


def test_a_table_masked_from_the_start_before_rules_were_recorded_is_not_masked_again(from_start, spark):
    """A table written by a cdc_apply that recorded no rules (the property removed here): its masked
    columns, whose values all look masked, are taken as masked from the start."""
    lake = from_start
    for path in (f"{lake.config.silver.path}/public/people", f"{lake.config.silver.path}_history/public/people"):
        spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('cdc_apply.masks_applied')")
    lake.run("UPDATE people SET n = 12 WHERE id = 2")
    printed = lake.land_and_apply()
    assert "VACUUM" not in printed
    assert lake.silver_differences() == []
    assert [d for d in lake.history_differences() if "public.people" in d] == []
    props = {r.key: r.value for r in spark.sql(
        f"SHOW TBLPROPERTIES delta.`{lake.config.silver.path}/public/people`").collect()}
    assert "cdc_apply.masks_applied" in props
