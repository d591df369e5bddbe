"""`cdc_apply.forget` on a real PostgreSQL landed and applied by the real lander and apply job: after a forget and
a VACUUM, no file under the lake holds the forgotten person's values (every Parquet value, footer statistic and
`_delta_log` line searched), silver still equals the source, and a replay of bronze into a new silver gives the
same silver."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cdc_apply.delta.refs import state_ref
from cdc_apply.errors import ForgetError
from cdc_apply.forgetting.run import forget
from tests.lake.pg_lake import PgLake, beside

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# The person to forget: values no other row holds, so a byte search of the lake finds only them.
SECRETS = ("ada-7f3a9c", "Ada Forgetme-Lovelace", "ada.7f3a9c@example.org", "Rue des Oublies 17")
SETUP = [
    "CREATE TABLE customers (id text PRIMARY KEY, name text, email text, address text)",
    "CREATE TABLE orders (id int PRIMARY KEY, customer text, note text)",
    "CREATE TABLE pairs (a int, b text, v text, PRIMARY KEY (a, b))",
    "INSERT INTO customers SELECT 'c' || g, 'name ' || g, 'c' || g || '@example.org', 'street ' || g "
    "FROM generate_series(1, 200) g",
    f"INSERT INTO customers VALUES ('{SECRETS[0]}', '{SECRETS[1]}', 'first-{SECRETS[2]}', 'nowhere')",
    "INSERT INTO orders SELECT g, 'c' || (g % 200 + 1), 'order ' || g FROM generate_series(1, 100) g",
    "INSERT INTO pairs SELECT g % 10, 'b' || g, 'v' || g FROM generate_series(1, 50) g",
]
# The person's life after the slot: updates (one of the key's values only in the old tuple's history), then
# the source's DELETE — the row is gone from PostgreSQL, but the lake keeps every message and version.
LIFE = [
    [f"UPDATE customers SET email = '{SECRETS[2]}' WHERE id = '{SECRETS[0]}'"],
    [f"UPDATE customers SET address = '{SECRETS[3]}' WHERE id = '{SECRETS[0]}'",
     "UPDATE customers SET name = 'renamed 5' WHERE id = 'c5'"],
    ["INSERT INTO pairs VALUES (3, 'forget-pair-9b1e', 'pair secret 9b1e')"],
    [f"DELETE FROM customers WHERE id = '{SECRETS[0]}'", "DELETE FROM pairs WHERE b = 'forget-pair-9b1e'",
     "UPDATE customers SET email = 'x@example.org' WHERE id = 'c9'"],
]


@pytest.fixture(scope="module")
def lake(postgres, spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("forget")
    lake = PgLake(postgres, spark, root, "forget", SETUP,
                  {"silver": {"history": ["public.*"], "soft_deletes": ["public.customers"]}})
    lake.root = root
    lake.land_and_apply()
    for statements in LIFE:
        lake.run(*statements)
        lake.land_and_apply()
    yield lake
    lake.close()


def while_landing(lake, call):
    """``call()`` while the lander and the apply job keep running (a landing and a batch every half second)."""
    return beside(lake.land_and_apply, call)


def lake_files_holding(root: Path, needles: tuple[str, ...]) -> list[str]:
    """Every file under ``root`` that holds one of ``needles``: in its raw bytes (a Parquet footer's statistics
    included) or in any Parquet value (pages are compressed: read back)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        texts = [raw]
        if path.suffix == ".parquet":   # the footer's statistics are plain bytes; the pages are compressed
            texts.append(json.dumps(pq.read_table(path).to_pylist(), default=repr).encode())
        if any(needle.encode() in text for needle in needles for text in texts):
            found.append(str(path.relative_to(root)))
    return found


def test_forget_refuses_a_key_the_source_still_holds_naming_it(lake):
    with pytest.raises(ForgetError, match="the source still holds 1 of the keys .*c7"):
        forget(lake.spark, lake.lander_config, "public.customers", ["c7"], wait_seconds=5)


def test_forget_refuses_a_key_that_does_not_name_every_key_column(lake):
    with pytest.raises(ForgetError, match="must name exactly the key columns a, b"):
        forget(lake.spark, lake.lander_config, "public.pairs", ['{"a": 3}'], wait_seconds=5)


def test_forget_removes_every_trace_of_a_person_from_the_lake_once_vacuumed(lake):
    assert lake_files_holding(lake.root, SECRETS), "the lake should hold the person before the forget"
    run = while_landing(lake, lambda: forget(lake.spark, lake.lander_config, "public.customers", [SECRETS[0]],
                                             wait_seconds=300, retain_hours=0, vacuum=True))
    print("\n".join(run.lines()))
    # The snapshot's Insert, two Updates, the Delete; the soft-deleted row; three history versions.
    assert (run.bronze_messages, run.silver_rows, run.history_rows) == (4, 1, 3)
    assert lake_files_holding(lake.root, SECRETS) == []
    assert lake.silver_differences() == []
    recorded = lake.spark.read.format("delta").load(state_ref(lake.config, "forgotten").path).collect()
    assert [(r.table, r.silver_rows) for r in recorded] == [("public.customers", 1)]
    assert SECRETS[0] not in json.dumps([r.asDict() for r in recorded], default=str)


def test_forget_of_a_composite_key_removes_its_messages_and_rows(lake):
    key = json.dumps({"a": 3, "b": "forget-pair-9b1e"})
    run = while_landing(lake, lambda: forget(lake.spark, lake.lander_config, "public.pairs", [key], wait_seconds=300))
    assert (run.bronze_messages, run.silver_rows, run.history_rows) == (2, 0, 1)
    assert run.lines()[-1].startswith("older files of bronze, the quarantine, silver and history")


def test_a_replay_of_bronze_after_a_forget_gives_the_same_silver(lake, spark, tmp_path):
    """A new silver and state location over the same bronze: applied from the first message, equal to PostgreSQL."""
    from cdc_apply.config import parse_config
    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.lake.pipeline import ApplyPipeline

    raw = {"pipeline": "forget-replay", "bronze": {"path": lake.config.bronze.path},
           "silver": {"path": str(tmp_path / "silver"), "history": ["public.*"]},
           "state": {"path": str(tmp_path / "state")}}
    replay = parse_config(raw)
    ApplyPipeline.open(spark_tables(spark), replay, out=io.StringIO()).run(once=True)
    from cdc_apply.testing.compare import compare_with_postgres

    checks = compare_with_postgres(spark, replay, lake.conn, source=PgLake.SOURCE, schemas=["public"])
    assert checks and [c.line() for c in checks if not c.equal] == []
    assert lake_files_holding(tmp_path, SECRETS) == []
