"""A real Spark standalone cluster on 127.0.0.1, from pip's pyspark, for the cluster tests (make cluster).

:func:`start_standalone` starts a master and workers (``spark-class ...Master`` / ``...Worker``), each in
a process group of its own, and waits until every worker has registered; :meth:`StandaloneCluster.stop`
kills the groups (executors and their Python workers are the workers' children, so they go too).
:func:`executor_python` makes the Python an executor runs: a virtualenv of the driver's Python version
with only what the decode needs besides cdc_apply (pyarrow, numpy), so the job must bring cdc_apply to
the executors itself. :func:`run_group` runs a command (spark-submit, the CLI) in a group of its own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cdc_apply.testing.processes import Finished, session_processes

# Environment a cluster process must not inherit from the test run: PYTHONPATH would let executors import
# the checkout's cdc_apply, and the others would choose their Python or Spark for them.
_DRIVER_ONLY = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR",
                "VIRTUAL_ENV", "PYTEST_ADDOPTS", "SPARK_REMOTE")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_home() -> Path:
    """pyspark's own folder: its ``bin/`` (spark-class, spark-submit) and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(**extra: str) -> dict[str, str]:
    """The environment of a cluster process: this one's, bound to 127.0.0.1, without the driver-only keys."""
    env = {key: value for key, value in os.environ.items() if key not in _DRIVER_ONLY}
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    env.update(extra)
    return env


def executor_python(folder: Path, packages: tuple[str, ...]) -> Path:
    """A virtualenv at ``folder`` of this interpreter's Python version holding only ``packages`` (pip
    specifiers, e.g. ``pyarrow==22.0.0``); made once, then reused while its stamp names the same packages."""
    python = folder / "bin" / "python"
    stamp = folder / "cdc_apply-executor.txt"
    wanted = "\n".join(packages) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(folder)], check=True, capture_output=True)
    if packages:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
                       check=True, capture_output=True)
    stamp.write_text(wanted)
    return python


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``master_url`` is what ``--master`` takes."""

    master_url: str
    web_url: str
    workdir: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        """The master's JSON view: workers, cores, running applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        """SIGTERM to every group, SIGKILL to what is left after a few seconds; returns when all are gone."""
        for proc in reversed(self.processes):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(session_processes(p.pid) for p in self.processes) and time.monotonic() < deadline:
            time.sleep(0.1)
        for proc in self.processes:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        while any(session_processes(p.pid) for p in self.processes):
            time.sleep(0.05)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _spawn(args: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)


def start_standalone(workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                     timeout: float = 120) -> StandaloneCluster:
    """Start a master and ``workers`` workers of ``cores`` cores and ``memory`` each, on 127.0.0.1."""
    workdir.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, web = free_port(), free_port()
    env = cluster_env(SPARK_LOG_DIR=str(workdir / "logs"), SPARK_WORKER_DIR=str(workdir / "work"))
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", workdir)
    try:
        cluster.processes.append(_spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                         "--port", str(port), "--webui-port", str(web)],
                                        workdir / "master.log", env, workdir))
        _wait_for(lambda: cluster.state() is not None, timeout, cluster, "the master's web UI")
        for number in range(workers):
            cluster.processes.append(_spawn(
                [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                 "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                 "--work-dir", str(workdir / f"work-{number}")],
                workdir / f"worker-{number}.log", env, workdir))
        _wait_for(lambda: cluster.state().get("aliveworkers", 0) >= workers, timeout, cluster,
                  f"{workers} workers to register")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_for(ready, timeout: float, cluster: StandaloneCluster, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                             for p in sorted(cluster.workdir.glob("*.log")))
            raise TimeoutError(f"waited {timeout:.0f}s for {what}\n{logs}")
        for proc in cluster.processes:
            if proc.poll() is not None:
                args = proc.args
                assert isinstance(args, list)  # _spawn starts each process from a list of str: spark-class, its class
                raise RuntimeError(f"a cluster process exited ({str(args[1])}: {proc.returncode}); see "
                                   f"{cluster.workdir}")
        time.sleep(0.25)


def run_group(name: str, args: list[str], logdir: Path, cwd: Path, env: dict[str, str],
              timeout: float = 600) -> Finished:
    """Run ``args`` in a process group of its own to its end (or SIGKILL the group at ``timeout``)."""
    logdir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logdir / f"{name}.out", logdir / f"{name}.err"
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([str(a) for a in args], stdout=out, stderr=err, cwd=cwd, env=env,
                                start_new_session=True)
    killed = None
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = f"timeout after {timeout:.0f}s"
    _signal_group(proc.pid, signal.SIGKILL)   # what the command left behind (a JVM's children) goes too
    proc.wait()
    while session_processes(proc.pid):
        time.sleep(0.05)
    seconds = time.monotonic() - started
    return Finished(name, proc.returncode, seconds, killed, seconds if killed else None,
                    out_path.read_text(errors="replace"), err_path.read_text(errors="replace"))
