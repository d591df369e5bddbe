"""An S3-compatible server on 127.0.0.1 (moto's, from PyPI: ``moto[server]``) for the object storage tests.

:func:`start_s3_server` starts ``moto_server`` in a process group of its own and makes a bucket;
:meth:`S3Server.spark_conf` is the Spark configuration that reaches it through Hadoop's ``s3a://`` file
system (the jars of :mod:`cdc_apply.spark.s3_jars` on ``spark.jars``), and :func:`write_spark_defaults`
writes it where a command line started from plain Python reads it (``$SPARK_CONF_DIR``);
:meth:`S3Server.environment` is the standard ``AWS_*`` variables that point delta-rs at it (the lander and
``cdc-apply status`` without a JVM).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cdc_apply.testing.cluster import free_port
from cdc_apply.testing.processes import session_processes

ACCESS_KEY = SECRET_KEY = "testing"   # moto accepts any credentials
REGION = "us-east-1"


@dataclass
class S3Server:
    """A running S3-compatible server with one bucket."""

    endpoint: str          # http://127.0.0.1:<port>
    bucket: str
    process: subprocess.Popen

    def url(self, path: str) -> str:
        """``s3a://<bucket>/<path>``."""
        return f"s3a://{self.bucket}/{path.lstrip('/')}"

    def environment(self, secret: str = SECRET_KEY) -> dict[str, str]:
        """The standard AWS variables a user sets for this server (moto takes any ``secret``)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": secret}

    def spark_conf(self, jars: list[Path]) -> dict[str, str]:
        """Spark settings for ``s3a://`` paths on this server, ``jars`` (hadoop-aws and the SDK) added; with
        cdc_apply's S3 log store among them, the settings that make Delta's commits exclusive (s3_commits)."""
        from cdc_apply.spark.s3_commits import EXCLUSIVE_SETTINGS, LOG_STORE_JAR

        exclusive = EXCLUSIVE_SETTINGS if any(Path(j).name == LOG_STORE_JAR for j in jars) else {}
        hadoop = {"fs.s3a.endpoint": self.endpoint, "fs.s3a.endpoint.region": REGION,
                  "fs.s3a.path.style.access": "true", "fs.s3a.connection.ssl.enabled": "false",
                  "fs.s3a.access.key": ACCESS_KEY, "fs.s3a.secret.key": SECRET_KEY}
        return {"spark.jars": ",".join(str(j) for j in jars), **exclusive,
                **{f"spark.hadoop.{key}": value for key, value in hadoop.items()}}

    def list_keys(self, prefix: str) -> str:
        """The bucket's keys under ``prefix``, one per line (a plain ListObjectsV2 request, first 1,000)."""
        query = urllib.parse.urlencode({"list-type": "2", "prefix": prefix})
        with urllib.request.urlopen(f"{self.endpoint}/{self.bucket}?{query}", timeout=5) as answer:
            body = answer.read().decode()
        return "\n".join(re.findall(r"<Key>([^<]*)</Key>", body))

    def stop(self) -> None:
        """Kill the server's group and wait until it is gone."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        while session_processes(self.process.pid):
            time.sleep(0.05)


def start_s3_server(workdir: Path, bucket: str = "lake", timeout: float = 60) -> S3Server:
    """Start ``moto_server`` on a free port of 127.0.0.1 and create ``bucket`` (a plain HTTP PUT)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    with open(workdir / "moto.log", "wb") as log:
        proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    s3 = S3Server(f"http://127.0.0.1:{port}", bucket, proc)
    deadline = time.monotonic() + timeout
    while True:
        try:
            request = urllib.request.Request(f"{s3.endpoint}/{bucket}", method="PUT")
            with urllib.request.urlopen(request, timeout=5):
                return s3
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                s3.stop()
                raise RuntimeError(f"moto_server did not start: {(workdir / 'moto.log').read_text()[-2000:]}")
            time.sleep(0.2)


def write_spark_defaults(folder: Path, conf: dict[str, str]) -> Path:
    """``<folder>/spark-defaults.conf`` holding ``conf``; point ``$SPARK_CONF_DIR`` at ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spark-defaults.conf"
    path.write_text("".join(f"{key} {value}\n" for key, value in sorted(conf.items())))
    return path
