"""A local Spark Connect server with Delta in a child process, and Connect sessions to it: the ``connect`` fixture's.

The child runs what ``SparkSession.builder.remote("local[2]")`` runs in the caller's process (pyspark's
``SparkSession._start_connect_server``: a classic SparkContext with Spark's Connect plugin), with
:func:`cdc_apply.spark.connect.local_connect_settings` (Delta's jars, extension and catalog), on a port
the operating system picks; it writes that port to a file and serves until its standard input closes
(the parent stopped it, or died). A child, not this process, because pyspark decides per *process*
whether its functions build Connect or classic expressions (``pyspark.sql.utils.is_remote``: the
``SPARK_CONNECT_MODE_ENABLED`` environment variable), and it refuses to start a local Connect server
in a process that already runs a classic SparkContext: a test process that also holds the classic
``spark`` fixture's session keeps it, and turns Connect mode on only while a Connect test runs
(:func:`connect_mode`).

``python -m cdc_apply.testing.connect_server MASTER FOLDER`` is the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from cdc_apply.errors import SetupError

START_SECONDS = 180.0
_PORT_FILE = "port.json"


@dataclass
class ConnectServer:
    """A running child Connect server: its process, port and token, and its log (stdout and stderr)."""

    process: subprocess.Popen
    port: int
    token: str
    folder: Path

    @property
    def url(self) -> str:
        """The ``sc://`` address a Connect client uses (the token travels in it)."""
        return f"sc://localhost:{self.port}/;token={self.token}"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def session(self):
        """A new Connect session (a client) of this server."""
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        return ConnectSession.builder.remote(self.url).create()

    def stop(self, timeout: float = 60.0) -> None:
        """Close the child's standard input (it stops its SparkContext and exits); kill it if it has not
        exited within ``timeout``."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # type: ignore[union-attr]
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_connect_server(folder: Path, master: str = "local[2]", timeout: float = START_SECONDS) -> ConnectServer:
    """Start the child server with Delta (its warehouse, log and port file under ``folder``) and wait for
    its port; :class:`SetupError` with the end of its log when it exits or does not answer in ``timeout``."""
    folder.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    env = {key: value for key, value in os.environ.items()
           if key not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE",
                          "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "cdc_apply.testing.connect_server", master, str(folder)],
                                   stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env)
    port_file = folder / _PORT_FILE
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
                process.wait()
            tail = (folder / "server.log").read_text(errors="replace")[-3000:]
            raise SetupError("the local Spark Connect server did not start", master=master, log=tail)
        time.sleep(0.2)
    port = int(json.loads(port_file.read_text())["port"])
    return ConnectServer(process, port, token, folder)


@contextmanager
def connect_mode() -> Iterator[None]:
    """Within the block this process builds Spark Connect expressions (``pyspark.sql.functions``, Delta's
    ``DeltaTable``): pyspark's ``SPARK_CONNECT_MODE_ENABLED``, as ``remote()`` sets it, taken away after."""
    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = before


def _serve(master: str, folder: Path) -> None:
    from pyspark import SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from cdc_apply.spark.connect import CONNECT_PORT, local_connect_settings

    # The server starts Python workers (mapInArrow, UDFs) with $PYSPARK_PYTHON, not spark.pyspark.python:
    # this interpreter, whose packages (pyarrow, cdc_apply) the client's functions import.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = local_connect_settings(master, **{CONNECT_PORT: "0",
                                                 "spark.sql.warehouse.dir": str(folder / "warehouse"),
                                                 "spark.driver.memory": "2g"})
    ConnectSession._start_connect_server(master, settings)
    service_class = getattr(SparkContext._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$")
    service = getattr(service_class, "MODULE$")
    partial = folder / (_PORT_FILE + ".partial")
    partial.write_text(json.dumps({"port": int(service.localPort())}))
    partial.rename(folder / _PORT_FILE)
    sys.stdin.read()  # until the parent closes it, or dies
    context = SparkContext._active_spark_context
    assert context is not None  # the server started above runs in it
    context.stop()


if __name__ == "__main__":
    _serve(sys.argv[1], Path(sys.argv[2]))
