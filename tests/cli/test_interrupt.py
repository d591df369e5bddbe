"""Ctrl-C (SIGINT) and SIGTERM stop a continuous ``cdc-apply apply`` the way the lander stops: the batch
under way is applied, none starts after, one line says so and the command exits 0 — no Python or Java
traceback, no failure recorded for ``cdc-apply status`` to report."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdc_apply.testing.pytest_plugin import Lake
from cdc_apply.testing.stream import StreamBuilder

pytestmark = [pytest.mark.spark, pytest.mark.system]

CLI = Path(sys.executable).parent / "cdc-apply"


def _insert(builder: StreamBuilder, table, ids: range) -> None:
    with builder.transaction() as tx:
        for i in ids:
            tx.insert(table, {"id": i, "v": f"v{i}"})


def _apply_until(config: str, work: Path, sig: signal.Signals, name: str) -> tuple[int, str, str]:
    """The continuous apply started; ``sig`` sent once its first batch line is out; its exit and output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYTEST_ADDOPTS")}
    env["JAVA_TOOL_OPTIONS"] = "-XX:TieredStopAtLevel=1"   # a short-lived JVM: C1 saves most of its CPU
    out, err = work / f"{name}.out", work / f"{name}.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([str(CLI), "apply", "--config", config, "--progress-seconds", "0"],
                                env=env, cwd=work, stdout=o, stderr=e)
        deadline = time.monotonic() + 300
        while "txns applied" not in out.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(sig)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    drop = ("Picked up JAVA_TOOL_OPTIONS",)
    text = lambda p: "\n".join(line for line in p.read_text(errors="replace").splitlines()  # noqa: E731
                               if line.strip() and not line.startswith(drop))
    return code, text(out), text(err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_stops_the_continuous_apply_after_its_batch_with_one_line_and_exit_0(spark, tmp_path, sig):
    lake = Lake(spark, tmp_path / "lake", pipeline="interrupt", apply={"trigger_interval": "1 second"})
    changes = StreamBuilder("src")
    t = changes.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    _insert(changes, t, range(1, 6))
    lake.land(changes)
    config = str(lake.write_config())
    code, out, err = _apply_until(config, tmp_path, sig, sig.name)
    print(out, err, sep="\n--- stderr\n")
    assert code == 0, (code, out, err)
    assert "Traceback" not in out + err and "Py4J" not in out + err and "Exception" not in err, err
    stopped = [line for line in (out + "\n" + err).splitlines() if "stopped by a signal" in line]
    assert len(stopped) == 1, (out, err)
    assert len(err.splitlines()) <= 3, err
    assert lake.silver("public.t").count() == 5
    # Nothing recorded as failed, and the next run (here, in this process) goes on from where it stopped.
    _insert(changes, t, range(6, 8))
    lake.land(changes)
    # A micro-batch the stopped query applied but had not yet checkpointed comes again first: it applies
    # nothing (its seqs are applied already), then the new transaction.
    assert sum(r.transactions for r in lake.apply()) == 1
    assert lake.silver("public.t").count() == 7
    assert lake.table("failures").count() == 0
