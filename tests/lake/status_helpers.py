"""Helpers for ``cdc-apply status``'s tests on a lake (``test_status.py``): the command run on it, each
status also read both ways (without a JVM, with Spark) for the comparison, sources of one table each,
transactions committed at a chosen time, and a source's messages landed a part at a time."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout
from datetime import datetime, timedelta
from pathlib import Path

from cdc_apply.cli.main import main
from cdc_apply.config import load_config
from cdc_apply.lake.books.status import read_status_spark
from cdc_apply.lake.books.status_files import read_status_files
from cdc_apply.pgoutput.messages import PG_EPOCH
from cdc_apply.testing.stream import StreamBuilder

# Keys measured against the time of asking: two reads ask a moment apart.
CLOCK_KEYS = ("lag_seconds", "applied_commit_age_seconds")


def config_file(lake) -> Path:
    """The lake's configuration as the command line reads it."""
    path = lake.root / "pipeline.toml"
    on_error = lake.extra.get("apply", {}).get("on_error", "fail")
    formats = "".join(f'{s} = "{f}"\n' for s, f in lake.extra.get("bronze", {}).get("formats", {}).items())
    path.write_text(f'[bronze]\npath = "bronze"\n[bronze.formats]\n{formats}[silver]\npath = "silver"\n'
                    f'[state]\npath = "state"\n[apply]\non_error = "{on_error}"\n')
    return path


class Status:
    """What ``cdc-apply status --json`` said at one moment of a lake's story, and the same status read
    right after both ways: (without a JVM, with Spark, seconds between the two reads)."""

    def __init__(self, lake, *args: str) -> None:
        path = config_file(lake)
        out = io.StringIO()
        with redirect_stdout(out):
            self.code = main(["status", "--config", str(path), "--json", *args])
        self.entries = [json.loads(line) for line in out.getvalue().splitlines()]
        self.both_ways = both_ways(lake, *args)

    def of(self, source: str | None) -> dict:
        (entry,) = [e for e in self.entries if e["source"] == source]
        return entry

    def sources(self) -> set:
        return {e["source"] for e in self.entries}


def both_ways(lake, *args: str) -> tuple[list[dict], list[dict], float]:
    options = dict(zip(args[::2], args[1::2]))
    window = timedelta(hours=float(options.get("--quarantine-hours", 24)))
    max_lag = float(options["--max-lag-seconds"]) if "--max-lag-seconds" in options else None
    config = load_config(config_file(lake))
    started = time.monotonic()
    files = read_status_files(config, window, max_lag)
    spark = read_status_spark(lake.spark, config, window, max_lag)
    return files, spark, time.monotonic() - started


def assert_same(files: list[dict], spark: list[dict], apart: float) -> None:
    """The two reads agree: every key, and the clock keys within the seconds between the reads."""
    assert [list(e) for e in files] == [list(e) for e in spark]
    for mine, theirs in zip(files, spark):
        assert {k: v for k, v in mine.items() if k not in CLOCK_KEYS} == \
               {k: v for k, v in theirs.items() if k not in CLOCK_KEYS}
        for key in CLOCK_KEYS:
            if theirs[key] is None or mine[key] is None:
                assert mine[key] == theirs[key], key
            else:   # read first without a JVM, then with Spark: Spark's clock is up to ``apart`` later
                assert abs(mine[key] - theirs[key]) <= apart + 1, (key, mine[key], theirs[key])
                assert (mine[key] == 0) == (theirs[key] == 0), (key, mine[key], theirs[key])


def commit_at(b: StreamBuilder, rel, ident: int, when: datetime) -> None:
    """A transaction inserting ``ident``, committed at ``when`` (Begin and Commit carry the time)."""
    first = len(b.messages())
    with b.transaction() as tx:
        tx.insert(rel, {"id": ident, "v": "x"})
    micros = (when - PG_EPOCH) // timedelta(microseconds=1)
    b.patch(first, commit_ts=micros)
    b.patch(len(b.messages()) - 1, commit_ts=micros)


def source(name: str) -> tuple[StreamBuilder, object]:
    """A pgoutput source writing one table of its own, ``public.<name>``."""
    b = StreamBuilder(name)
    return b, b.relation("public", name, [("id", "int4", True), ("v", "text", False)])


class Landing:
    """A source's messages landed a part at a time: each ``land`` is the ones built since the last."""

    def __init__(self, lake, b: StreamBuilder) -> None:
        self.lake, self.b, self.done = lake, b, 0

    def land(self, upto: int | None = None) -> int:
        """Land the messages built since the last landing (up to ``upto``, a Python slice end) as one
        bronze commit; returns the newest seq landed."""
        rows = self.b.rows()[self.done:upto]
        self.lake.land(rows)
        self.done += len(rows)
        return rows[-1][1]
