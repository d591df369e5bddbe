"""The Spark half of the GaussDB differential test: one workload landed as pgoutput and as
GaussDB binary records gives identical silver tables (format-specific metadata columns aside)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gaussdb"))
from gaussdb_workload import build  # noqa: E402

pytestmark = pytest.mark.spark

KEYS = {"public.accounts": {"key": ["id"]}, "shop.orders": {"key": ["region", "no"]}}


def _rows(df):
    cols = [c for c in df.columns if not c.startswith("_cdc_")]
    return sorted((tuple(r) for r in df.select(*[F.col(f"`{c}`") for c in cols]).collect()), key=repr), cols


def test_pgoutput_and_gaussdb_streams_of_one_workload_give_identical_silver(lake_factory):
    workload = build(seed=20261122, transactions=20)
    pg = lake_factory("gauss_pg")
    pg.land(workload.builder.rows())
    pg.apply()

    gauss = lake_factory("gauss_gs", tables=KEYS, gaussdb={"include_user": True},
                         bronze={"formats": {"gauss": "gaussdb"}})
    payloads = workload.payloads(random.Random(7))
    half = len(payloads) // 2
    for start, end in ((0, half), (half, len(payloads))):   # two micro-batches, cut mid-transaction
        gauss.land([("gauss", i, 0, payloads[i]) for i in range(start, end)])
    gauss.apply()

    for name in workload.expected:
        namespace, table = name.split(".")
        want, cols = _rows(pg.silver(namespace, table))
        got, got_cols = _rows(gauss.silver(namespace, table))
        assert got_cols == cols and got == want, name
    users = {r._cdc_user for r in gauss.silver("public", "accounts").collect()}
    assert users <= set(workload.users) | {None} and users - {None}
    progress = gauss.state("progress").orderBy(F.desc("apply_version")).first()
    assert progress.carried == 0 and progress.applied_seq > 0
