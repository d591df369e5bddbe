"""``cdc-apply demo``: the smallest end-to-end run a fresh clone can do.

For now it proves the runtime: a Delta table is created, a change set is
MERGEd into it, and the result is printed and checked.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path


def run_demo(workdir: str = "demo-data") -> int:
    from delta.tables import DeltaTable

    from cdc_apply import spark_session

    started = time.monotonic()
    root = Path(workdir).resolve()
    table_path = root / "silver" / "public" / "customers"
    if table_path.exists():
        shutil.rmtree(table_path)
    print(f"[demo] starting Spark (local[2]) ...", flush=True)
    spark = spark_session("cdc_apply-demo")

    base = spark.createDataFrame(
        [(1, "Ada", "ada@example.com"), (2, "Brian", "brian@example.com"), (3, "Chen", "chen@example.com")],
        "id INT, name STRING, email STRING",
    )
    base.write.format("delta").save(str(table_path))
    print(f"[demo] created Delta table {table_path} with {base.count()} rows", flush=True)

    changes = spark.createDataFrame(
        [(2, "Brian", "brian@new.example.com", "U"), (3, None, None, "D"), (4, "Dana", "dana@example.com", "I")],
        "id INT, name STRING, email STRING, op STRING",
    )
    (
        DeltaTable.forPath(spark, str(table_path)).alias("t")
        .merge(changes.alias("s"), "t.id = s.id")
        .whenMatchedDelete("s.op = 'D'")
        .whenMatchedUpdate(set={"name": "s.name", "email": "s.email"})
        .whenNotMatchedInsert(condition="s.op <> 'D'", values={"id": "s.id", "name": "s.name", "email": "s.email"})
        .execute()
    )
    result = spark.read.format("delta").load(str(table_path)).orderBy("id")
    print("[demo] after MERGE of 1 update, 1 delete, 1 insert:", flush=True)
    result.show(truncate=False)
    got = [tuple(r) for r in result.collect()]
    expected = [(1, "Ada", "ada@example.com"), (2, "Brian", "brian@new.example.com"), (4, "Dana", "dana@example.com")]
    if got != expected:
        print(f"[demo] FAILED: expected {expected}, got {got}")
        return 1
    print(f"[demo] OK in {time.monotonic() - started:.1f}s", flush=True)
    return 0
