"""``cdc-apply land`` into a bronze path starts no JVM; Spark reads what it landed, and ``cdc-apply optimize
--bronze`` (Spark) may compact bronze while the lander commits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from lander_helpers import bronze_rows, create_slot, make_config, peek, run_lander, slot_options

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# pyspark and py4j made unimportable: a lander that reached for Spark would fail, not start a JVM.
NO_SPARK = ("import sys; sys.modules['pyspark'] = None; sys.modules['py4j'] = None; sys.modules['delta'] = None\n"
            "from cdc_apply.cli.main import main\n"
            "code = main(sys.argv[1:])\n"
            "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j')) and sys.modules[m]]\n"
            "sys.exit(code)\n")

CONFIG = """pipeline = "nojvm"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[source]
name = "pg"
dsn = "{dsn}"
slot = "nojvm"
publication = "pub"
[land]
batch_seconds = 0.5
idle_exit_seconds = 1.0
"""


def _java_children(pid: int) -> list[str]:
    """Command names of the live descendants of ``pid`` that are a JVM."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and "java" in name:
            found.append(name)
    return found


def test_the_land_command_lands_into_a_bronze_path_without_a_jvm_and_spark_reads_it_whole(postgres, spark, tmp_path):
    db = "nojvm"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t", dbname=db)
    create_slot(postgres, db, "nojvm", twins=("nojvm_twin",))
    postgres.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 200) g", dbname=db)
    postgres.execute("UPDATE t SET v = 'changed' WHERE id <= 50", dbname=db)
    postgres.execute("INSERT INTO t SELECT g, repeat('x', 300) FROM generate_series(1000, 1400) g", dbname=db)
    (tmp_path / "nojvm.toml").write_text(CONFIG.format(root=tmp_path, dsn=postgres.dsn(db)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", NO_SPARK, "land", "--config", str(tmp_path / "nojvm.toml"),
                             "--once"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    jvms = []
    while proc.poll() is None:
        jvms += _java_children(proc.pid)
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    assert not jvms and "done:" in out
    rows = bronze_rows(spark, tmp_path / "bronze", "pg")
    expected = peek(postgres, db, "nojvm_twin", slot_options(two_phase=True))
    assert [p for _, _, p in rows] == [p for _, p in expected]
    assert [s for s, _, _ in rows] == list(range(len(rows)))


def test_optimize_of_bronze_while_the_lander_commits_loses_and_doubles_nothing(postgres, spark, tmp_path):
    from cdc_apply.lake.maintenance import optimize_bronze

    db = "land_optimize"
    postgres.create_database(db)
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname=db)
    postgres.execute("CREATE PUBLICATION pub FOR TABLE t", dbname=db)
    create_slot(postgres, db, "opt", twins=("opt_twin",))
    config = make_config(tmp_path, postgres.dsn(db), "pg", "opt", "pub", land={"batch_seconds": 0.2})
    stop, writes_done = threading.Event(), threading.Event()
    landed = {}

    def land():
        landed["summary"] = run_lander(config, None, once=False, stop=stop)[0]

    def write():
        for i in range(40):
            postgres.execute(f"INSERT INTO t SELECT g, 'v' FROM generate_series({i * 20}, {i * 20 + 19}) g", dbname=db)
            time.sleep(0.1)
        writes_done.set()

    threads = [threading.Thread(target=land), threading.Thread(target=write)]
    for t in threads:
        t.start()
    compactions = []
    while not writes_done.is_set() or len(compactions) < 2:
        time.sleep(0.5)
        done = optimize_bronze(spark, config)
        if done is not None:
            compactions.append(done)
    time.sleep(1.5)             # the last inserts land
    stop.set()
    for t in threads:
        t.join(timeout=120)
    assert "summary" in landed and any(c.files_removed > 1 for c in compactions)
    expected = peek(postgres, db, "opt_twin", slot_options(two_phase=True))
    rows = bronze_rows(spark, tmp_path / "bronze", "pg")
    assert [p for _, _, p in rows] == [p for _, p in expected]
    assert [s for s, _, _ in rows] == list(range(len(rows)))
    again, _ = run_lander(config, None)       # resumes from the compacted table's state: nothing new
    assert again.messages == 0 and again.state.last_seq == rows[-1][0]
