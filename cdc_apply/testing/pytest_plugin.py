"""pytest fixtures for testing pipelines built on cdc_apply: ``spark`` and ``lake``.

Installed with the package (the ``pytest11`` entry point ``cdc_apply``), so a project that depends
on cdc_apply gets them without a conftest::

    from cdc_apply.testing.stream import StreamBuilder

    def test_an_insert_reaches_silver(spark, lake):
        b = StreamBuilder("shop")
        users = b.relation("public", "users", [("id", "int4", True), ("name", "text", False)])
        with b.transaction() as tx:
            tx.insert(users, {"id": 1, "name": "Ada"})
        lake.land(b)
        lake.apply()
        assert lake.silver("public.users").count() == 1

* ``spark`` (session scope): :func:`cdc_apply.spark_session` — a session already running is used as
  it is, otherwise a local one with Delta is built (and stopped at the end of the run).
* ``lake`` (per test): a :class:`Lake`, bronze / silver / state folders under the test's ``tmp_path``.

A ``spark`` fixture of the project's own (in a conftest) takes precedence over this one, and
``lake`` then uses it: it must be a classic session with Delta. ``-p no:cdc_apply`` turns the plugin off.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from cdc_apply.lake.books.status_rules import StatusEntry


# A session built for tests interprets expressions instead of compiling them: a test's queries run
# once each on a few rows, where generating and compiling their Java code (Janino) costs more than
# running them — a Spark test module took ~30 % less time here. Only a session this plugin builds gets
# them; the job's own sessions (the command line, spark_session()) keep Spark's code generation.
TEST_SETTINGS: dict[str, str] = {"spark.sql.codegen.wholeStage": "false",
                                 "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def local_spark_session(app_name: str = "cdc_apply-tests"):
    """The session the ``spark`` fixture gives, and whether this call built it (then the fixture stops it):
    a running session as it is, otherwise :func:`cdc_apply.spark_session` with :data:`TEST_SETTINGS`."""
    from pyspark.sql import SparkSession

    from cdc_apply.spark.session import classic_session as spark_session

    existed = SparkSession.getActiveSession() is not None
    return spark_session(app_name, **({} if existed else spark_test_settings())), not existed


def spark_test_settings() -> dict[str, str]:
    """:data:`TEST_SETTINGS`, and the driver JVM's options with ``CDC_APPLY_TEST_JAVA_OPTIONS`` added when
    it is set (e.g. ``-XX:TieredStopAtLevel=1``; the session's own options stay)."""
    from cdc_apply.spark.session import JAVA_OPTIONS

    extra = os.environ.get("CDC_APPLY_TEST_JAVA_OPTIONS", "").strip()
    return {**TEST_SETTINGS, **({"spark.driver.extraJavaOptions": f"{JAVA_OPTIONS} {extra}"} if extra else {})}


@pytest.fixture(scope="session")
def spark():
    """A classic Spark session with Delta for the whole test run (see :func:`cdc_apply.spark_session`)."""
    session, built = local_spark_session("cdc_apply-pytest")
    yield session
    if built:
        session.stop()


@pytest.fixture
def lake(spark, tmp_path) -> "Lake":
    """A fresh bronze / silver / state layout under the test's ``tmp_path`` (see :class:`Lake`)."""
    return Lake(spark, tmp_path / "lake")


class Lake:
    """A bronze table, a silver root and a state location under one folder, and helpers to use them.

    ``land`` appends bronze rows, ``apply`` runs :func:`cdc_apply.apply` once over them, ``silver``,
    ``table`` and ``status`` read the results. ``configure`` adds configuration sections
    (``lake.configure(apply={"on_error": "quarantine"})``); :attr:`config` is the resulting
    :class:`~cdc_apply.config.Config`, the same one ``cdc-apply`` would read from a TOML file.
    """

    def __init__(self, spark: Any, root: str | Path, pipeline: str = "lake", **sections: dict[str, Any]) -> None:
        self.spark = spark
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.pipeline = pipeline
        self.sections: dict[str, dict[str, Any]] = {}
        # id(StreamBuilder) -> (the builder, how many of its rows are in bronze); the builder is kept so
        # its id cannot be reused by another one.
        self._landed: dict[int, tuple[Any, int]] = {}
        self.configure(**sections)

    @property
    def bronze_path(self) -> str:
        return str(self.root / "bronze")

    @property
    def silver_path(self) -> str:
        return str(self.root / "silver")

    @property
    def state_path(self) -> str:
        return str(self.root / "state")

    def configure(self, **sections: dict[str, Any]) -> "Lake":
        """Merge configuration sections (as in the TOML file) into this lake's; returns the lake."""
        for section, values in sections.items():
            if isinstance(values, dict):
                self.sections.setdefault(section, {}).update(values)
            else:
                self.sections[section] = values
        return self

    @property
    def raw_config(self) -> dict[str, Any]:
        """The configuration as a dict shaped like the TOML file."""
        raw: dict[str, Any] = {"pipeline": self.pipeline, "bronze": {"path": self.bronze_path},
                               "silver": {"path": self.silver_path}, "state": {"path": self.state_path}}
        for section, values in self.sections.items():
            if isinstance(values, dict) and isinstance(raw.get(section), dict):
                raw[section] = {**raw[section], **values}
            else:
                raw[section] = values
        return raw

    @property
    def config(self):
        from cdc_apply.config import config_from_dict

        return config_from_dict(self.raw_config, self.root)

    def write_config(self, name: str = "pipeline.toml") -> Path:
        """Write the configuration as a TOML file in the lake's folder (for ``cdc-apply --config``)."""
        path = self.root / name
        path.write_text(toml_text(self.raw_config), encoding="utf-8")
        return path

    def land(self, rows: Any) -> int:
        """Append bronze rows as one Delta commit (one micro-batch for the apply job); returns how many.

        ``rows``: a :class:`~cdc_apply.testing.stream.StreamBuilder` (only its rows this lake has not
        landed yet, so a test can land, add messages, land again), a DataFrame with the bronze columns,
        or ``(source, seq, lsn, payload)`` tuples. The bronze table is created on first use.
        """
        from cdc_apply.delta.bronze_schema import create_bronze_table
        from cdc_apply.delta.engine import spark_tables
        from cdc_apply.testing.stream import StreamBuilder

        create_bronze_table(spark_tables(self.spark), self.bronze_path)
        if isinstance(rows, StreamBuilder):
            every = rows.rows()
            done = self._landed.get(id(rows), (rows, 0))[1]
            self._landed[id(rows)] = (rows, len(every))
            rows = every[done:]
        if hasattr(rows, "sparkSession"):  # a DataFrame
            from pyspark.sql import functions as F

            landed_at = F.col("landed_at") if "landed_at" in rows.columns else F.lit(None).cast("timestamp")
            df = rows.select("source", "seq", "lsn", "payload", landed_at.alias("landed_at"))
            count = df.count()
            if count:
                df.coalesce(1).write.format("delta").mode("append").save(self.bronze_path)
            return count
        tuples = [tuple(r) for r in rows]
        if tuples:
            append_bronze(self.spark, self.bronze_path, tuples)
        return len(tuples)

    def apply(self, **kwargs: Any) -> list:
        """Apply everything landed (``cdc_apply.apply(spark, lake.config, once=True)``); one report per batch."""
        from cdc_apply.api import apply

        kwargs.setdefault("progress_seconds", None)
        return apply(self.spark, self.config, once=True, **kwargs)

    def status(self, **kwargs: Any) -> list[StatusEntry]:
        """``cdc_apply.status(spark, lake.config)``: one dict per source."""
        from cdc_apply.api import status

        return status(self.spark, self.config, **kwargs)

    def silver(self, table: str, namespace: str | None = None, source: str = ""):
        """A silver table as a DataFrame: ``lake.silver("public.users")`` or ``lake.silver("users", "public")``."""
        from cdc_apply.delta.refs import silver_ref

        if namespace is None:
            namespace, _, table = table.partition(".")
        return silver_ref(self.config, namespace, table, source).read(self.spark)

    def table(self, name: str):
        """A bookkeeping table (``transactions``, ``progress``, ``quarantine``, ``messages`` ...) as a DataFrame."""
        from cdc_apply.delta.refs import state_ref

        return state_ref(self.config, name).read(self.spark)

    def __repr__(self) -> str:
        return f"Lake({str(self.root)!r})"


__all__ = ["Lake", "lake", "local_spark_session", "spark"]


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def append_bronze(spark, path: str, rows) -> None:
    """Append bronze ``(source, seq, lsn, payload)`` rows to the Delta table at ``path`` as one commit:
    a Parquet file written by pyarrow and committed through Delta's log where the table allows it, as
    the lander does (no Spark job, ~0.1 s against ~0.5 s), through Spark's writer otherwise."""
    import os

    from cdc_apply.delta.engine import spark_tables
    from cdc_apply.delta.refs import TableRef
    from cdc_apply.lander.bronze_commit import append_rows

    rows = [tuple(r) for r in rows]
    location = os.path.abspath(path)
    if rows and append_rows(spark, location, spark_tables(spark).delta_log(TableRef(path=location)), rows):
        return
    from cdc_apply.delta.bronze_schema import spark_schema

    df = spark.createDataFrame([(*r[:4], None) for r in rows], spark_schema())
    df.coalesce(1).write.format("delta").mode("append").save(path)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def toml_text(raw: dict[str, Any], prefix: str = "") -> str:
    """A configuration dict as TOML text (scalars and lists first, then one [table] per nested dict)."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for key, value in raw.items():
        if isinstance(value, dict):
            header = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
            body = toml_text(value, header)
            if any(not isinstance(v, dict) for v in value.values()) or not value:
                lines.append(f"\n[{header}]")
            lines.append(body)
    return "\n".join(line for line in lines if line) + ("\n" if not prefix else "")
