"""`cdc-apply forget` SIGKILLed at random moments (its whole process group), beside a running lander and apply job,
then run until it exits 0: the key is gone from every file of the lake, bronze is append-only again, silver equals
PostgreSQL and the apply job goes on applying — whatever moment the kills hit."""

from __future__ import annotations

import os
import random
import time

import pytest

from cdc_apply.testing.processes import CliProcess
from tests.forgetting.test_forget_spark import lake_files_holding, while_landing
from tests.lake.pg_lake import PgLake

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system]

SEED = int(os.environ.get("CDC_APPLY_KILL_SEEDS", "1").split(",")[0])
SECRETS = ("kill-me-51c0", "Grace Killed-Hopper", "grace.51c0@example.org")
SETUP = [
    "CREATE TABLE people (id text PRIMARY KEY, name text, email text)",
    "INSERT INTO people SELECT 'p' || g, 'person ' || g, 'p' || g || '@example.org' FROM generate_series(1, 300) g",
    f"INSERT INTO people VALUES ('{SECRETS[0]}', '{SECRETS[1]}', 'old-{SECRETS[2]}')",
]
CONFIG = """pipeline = "forget_kills"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
history = ["public.*"]
[state]
path = "{root}/state"
[source]
name = "src"
dsn = "{dsn}"
"""


def test_a_forget_killed_at_random_moments_and_run_again_leaves_no_trace(postgres, spark, tmp_path):
    rng = random.Random(SEED)
    lake = PgLake(postgres, spark, tmp_path, "forget_kills", SETUP, {"silver": {"history": ["public.*"]}})
    lake.land_and_apply()
    lake.run(f"UPDATE people SET email = '{SECRETS[2]}' WHERE id = '{SECRETS[0]}'", "UPDATE people SET name = 'x'")
    lake.run(f"DELETE FROM people WHERE id = '{SECRETS[0]}'")
    lake.land_and_apply()
    config = tmp_path / "forget.toml"
    config.write_text(CONFIG.format(root=tmp_path, dsn=postgres.dsn("forget_kills")))
    args = ["forget", "--config", str(config), "--table", "public.people", "--key", SECRETS[0], "--retain-hours", "0",
            "--wait-seconds", "600"]
    env = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"}
    runs = []

    def forget_until_done():
        for n in range(3):   # killed at a moment drawn from the seed: JVM start, the wait, a DELETE, VACUUM...
            proc = CliProcess(f"forget-{n}", args, tmp_path / "logs", tmp_path, env)
            at = proc.started + rng.uniform(3.0, 45.0)
            runs.append(proc.wait(timeout=600, kill_when=lambda: "drawn" if time.monotonic() >= at else None))
            assert runs[-1].killed or runs[-1].returncode == 0, runs[-1].describe()
        last = CliProcess("forget-last", args, tmp_path / "logs", tmp_path, env)
        runs.append(last.wait(timeout=900))

    while_landing(lake, forget_until_done)
    print("\n".join(r.describe() for r in runs))
    assert runs[-1].returncode == 0, runs[-1].describe()
    assert "forgot 1 key(s) of public.people" in runs[-1].stdout
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{tmp_path / 'bronze'}`").collect()}
    assert props.get("delta.appendOnly") == "true" and props.get("cdc_apply.forget_opened") != "true"
    lake_parts = [tmp_path / part for part in ("bronze", "silver", "silver_history", "state")]
    assert [f for part in lake_parts for f in lake_files_holding(part, SECRETS)] == []
    lake.run("INSERT INTO people VALUES ('after', 'the forget', 'a@example.org')", "DELETE FROM people WHERE id = 'p1'")
    lake.land_and_apply()
    assert lake.silver_differences() == []
    lake.close()
