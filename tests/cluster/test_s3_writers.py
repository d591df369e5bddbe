"""Several writers of one Delta table on S3, racing: two Spark processes and a delta-rs writer, no commit lost.

Each writer appends one row per commit to the same table on moto's S3 server at the same moment. The
Spark processes use cdc_apply's S3 log store (``spark.delta.logStore.s3a.impl``, :mod:`cdc_apply.spark.s3_commits`:
version N's file is put with ``If-None-Match: *``); delta-rs puts its commits the same way. Afterwards
every row is there, the log's versions run 0..3N without a gap, and each version holds one writer's
commit. Without that log store (Delta's default ``S3SingleDriverLogStore``) the same race loses commits:
measured here, two Spark processes of 20 commits each kept 37 of 41 — the test fails then.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdc_apply.spark.s3_commits import LOG_STORE_CLASS, LOG_STORE_JAR

pytestmark = [pytest.mark.spark, pytest.mark.system, pytest.mark.cluster]

COMMITS = 6   # per writer

WORKER = """
import json, sys, time
from pathlib import Path
from cdc_apply.spark.session import classic_session
conf, table, tag, n, ready = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
spark = classic_session("race-" + tag, **conf)
spark.range(1).count()
(ready / tag).touch()
while len(list(ready.iterdir())) < 3:
    time.sleep(0.02)
for i in range(n):
    spark.createDataFrame([(tag, i)], "w string, i int").write.format("delta").mode("append").save(table)
spark.stop()
"""


def test_spark_and_delta_rs_writers_racing_on_one_table_lose_no_commit(s3_server, tmp_path):
    if s3_server is None:
        pytest.skip("the s3a jars are not fetched (python -m cdc_apply.spark.jars --s3)")
    server, jars = s3_server
    if not any(Path(j).name == LOG_STORE_JAR for j in jars):
        pytest.skip("cdc_apply's S3 log store is not built (no JDK)")
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    conf = server.spark_conf(jars)
    assert conf["spark.delta.logStore.s3a.impl"] == LOG_STORE_CLASS
    conf["spark.master"] = "local[1]"
    table = server.url("race/t")
    rs_uri = table.replace("s3a://", "s3://")
    options = {**server.environment(), "AWS_ALLOW_HTTP": "true"}

    def rows(tag: str, i: int) -> pa.Table:
        return pa.table({"w": [tag], "i": pa.array([i], pa.int32())})

    write_deltalake(rs_uri, rows("init", 0), storage_options=options)
    ready = tmp_path / "ready"
    ready.mkdir()
    logs = [tmp_path / f"{tag}.log" for tag in ("a", "b")]
    spark_writers = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(conf), table, tag, str(COMMITS),
                                       str(ready)], stdout=log.open("w"), stderr=subprocess.STDOUT)
                     for tag, log in zip(("a", "b"), logs)]
    failures: list[BaseException] = []

    def delta_rs_writer() -> None:
        try:
            (ready / "rs").touch()
            while len(list(ready.iterdir())) < 3:
                time.sleep(0.02)
            for i in range(COMMITS):
                write_deltalake(rs_uri, rows("rs", i), mode="append", storage_options=options)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    rs = threading.Thread(target=delta_rs_writer)
    rs.start()
    try:
        codes = [p.wait(timeout=600) for p in spark_writers]
    finally:
        for p in spark_writers:
            if p.poll() is None:
                p.kill()
    rs.join(timeout=300)
    assert codes == [0, 0], [log.read_text()[-3000:] for log in logs]
    assert not failures, failures

    dt = DeltaTable(rs_uri, storage_options=options)
    got = dt.to_pyarrow_table().to_pylist()
    for tag in ("a", "b", "rs"):
        assert sorted(r["i"] for r in got if r["w"] == tag) == list(range(COMMITS)), tag
    assert len(got) == 3 * COMMITS + 1
    versions = sorted(int(m) for m in re.findall(r"_delta_log/(\d{20})\.json", server.list_keys("race/t/_delta_log/")))
    assert versions == list(range(3 * COMMITS + 1))
    assert dt.version() == 3 * COMMITS
    assert len(dt.history()) == 3 * COMMITS + 1   # one commit per write: none overwritten by another's
    print(f"{len(got)} rows in {len(versions)} versions")
