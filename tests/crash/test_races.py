"""Two commands of one pipeline started together, as a scheduler that fires twice does: each ends with
exit 0 or the documented one-line error (exit 2) — never a traceback — and the pipeline stays right."""

from __future__ import annotations

import time

import pytest

from cdc_apply.testing.processes import CliProcess

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.system]

CONFIG = """pipeline = "races"
[bronze]
path = "{root}/bronze"
[silver]
path = "{root}/silver"
[state]
path = "{root}/state"
[source]
name = "races"
dsn = "{dsn}"
slot = "races"
publication = "races_pub"
create_slot = true
[land]
batch_seconds = 1.0
idle_exit_seconds = 1.0
"""


def _together(root, command: str, delay: float, label: str):
    first = CliProcess(f"{label}-a", [command, "--config", str(root / "races.toml"), "--once"], root / "logs", root)
    time.sleep(delay)
    second = CliProcess(f"{label}-b", [command, "--config", str(root / "races.toml"), "--once"], root / "logs", root)
    return [first.wait(timeout=600), second.wait(timeout=600)]


def _check(runs) -> None:
    for run in runs:
        assert run.returncode in (0, 2), run.describe()
        assert "Traceback" not in run.stderr, run.describe()
        if run.returncode == 2:
            assert run.error_line().startswith("cdc-apply: error:"), run.describe()
    assert any(run.returncode == 0 for run in runs), "\n".join(r.describe() for r in runs)


def test_two_landers_and_two_applies_started_together_end_in_exit_0_or_one_named_error(postgres, spark, tmp_path):
    from cdc_apply.config import load_config
    from cdc_apply.testing.compare import compare_with_postgres

    postgres.create_database("races")
    postgres.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", dbname="races")
    postgres.execute("CREATE PUBLICATION races_pub FOR TABLE t", dbname="races")
    postgres.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g", dbname="races")
    (tmp_path / "races.toml").write_text(CONFIG.format(root=tmp_path, dsn=postgres.dsn("races")))
    _check(_together(tmp_path, "land", 0.0, "land"))
    postgres.execute("UPDATE t SET v = 'w' WHERE id < 10", dbname="races")
    _check(_together(tmp_path, "land", 0.0, "land2"))
    _check(_together(tmp_path, "apply", 3.0, "apply"))
    last = CliProcess("apply-c", ["apply", "--config", str(tmp_path / "races.toml"), "--once"],
                      tmp_path / "logs", tmp_path).wait(timeout=600)
    assert last.returncode == 0, last.describe()
    conn = postgres.connect("races")
    try:
        checks = compare_with_postgres(spark, load_config(tmp_path / "races.toml"), conn, source="races",
                                       schemas=["public"])
    finally:
        conn.close()
    assert all(c.equal for c in checks), "\n".join(c.line() for c in checks)
