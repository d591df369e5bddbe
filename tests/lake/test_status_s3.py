"""``cdc-apply status`` on state tables and bronze on ``s3a://`` answers without a JVM when the environment
holds the store's credentials: the same entries as the same tables read at a local path. The lake is made
locally by the apply job (Spark), then its bronze and state are copied to an S3-compatible server (moto's;
the test skips without it) — Delta tables are relative to their folder, so the copy is the same tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from cdc_apply.config import load_config
from cdc_apply.delta.files import StoreFiles
from cdc_apply.lake.books.status import needs_spark
from cdc_apply.lake.books.status_files import read_status_files
from cdc_apply.testing.stream import StreamBuilder

NO_SPARK = ("import sys\n"
            "sys.modules['pyspark'] = sys.modules['py4j'] = sys.modules['delta'] = None  # no JVM can start\n"
            "from cdc_apply.cli.main import main\n"
            "raise SystemExit(main(sys.argv[1:]))\n")
CLOCK_KEYS = ("lag_seconds", "applied_commit_age_seconds")


def _copy_folder(local: Path, url: str) -> None:
    """Every file under ``local`` written to the same relative keys under ``url``."""
    store = StoreFiles(url.replace("s3a://", "s3://", 1))
    for path in local.rglob("*"):
        if path.is_file():
            store.put(path.relative_to(local).as_posix(), path.read_bytes())


def _config(path: Path, bronze: str, state: str) -> Path:
    path.write_text(f'pipeline = "lake"\n[bronze]\npath = "{bronze}"\n[silver]\npath = "silver"\n'
                    f'[state]\npath = "{state}"\n')
    return path


def test_status_on_s3_state_tables_answers_without_a_jvm_as_the_same_tables_read_locally(lake, s3_store, monkeypatch):
    b = StreamBuilder("pg")
    rel = b.relation("public", "items", [("id", "int4", True), ("v", "text", False)])
    for i in range(3):
        with b.transaction() as tx:
            tx.insert(rel, {"id": i, "v": f"v{i}"})
    lake.land(b)
    lake.apply()
    with b.transaction() as tx:                  # landed, not applied: status shows it as lag
        tx.insert(rel, {"id": 10, "v": "late"})
    lake.land(b)
    root = f"s3a://{s3_store.bucket}/status-{uuid.uuid4().hex[:8]}"
    for name, value in s3_store.environment().items():
        monkeypatch.setenv(name, value)
    _copy_folder(Path(lake.bronze_path), f"{root}/bronze")
    _copy_folder(Path(lake.state_path), f"{root}/state")

    on_s3 = _config(lake.root / "s3.toml", f"{root}/bronze", f"{root}/state")
    local = _config(lake.root / "local.toml", lake.bronze_path, lake.state_path)
    assert not needs_spark(load_config(on_s3))
    proc = subprocess.run([sys.executable, "-c", NO_SPARK, "status", "--config", str(on_s3), "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(),
                                                                            os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (entry,) = [json.loads(line) for line in proc.stdout.splitlines()]
    (expected,) = json.loads(json.dumps(read_status_files(load_config(local)), default=str))
    assert {k: v for k, v in entry.items() if k in expected and k not in CLOCK_KEYS} == \
           {k: v for k, v in expected.items() if k not in CLOCK_KEYS}
    assert (entry["source"], entry["lag_seq"], entry["health"]) == ("pg", 3, "ok")
