"""The differential suite, small: a seeded random workload on PostgreSQL 18 through every protocol
configuration; silver equals the source at each checkpoint (``make soak`` runs it large)."""

from __future__ import annotations

import io
import os

import pytest

from cdc_apply.testing.differential import run_differential

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SEED = int(os.environ.get("CDC_APPLY_DIFF_SEED", "20261122"))
# Every protocol version once, binary off and on; `make soak` runs all six configurations.
CONFIGS = ("v1_binary", "v2_stream", "v3_twophase", "v4_parallel")


def test_silver_equals_the_source_at_every_checkpoint_for_every_protocol_configuration(spark, postgres, tmp_path):
    """The tables hold rows (TOAST values among them) before any slot exists: each configuration's lander
    creates its slot with the initial snapshot, key ranges of 40 rows, then the workload goes on."""
    out = io.StringIO()
    print(f"differential seed {SEED} (set CDC_APPLY_DIFF_SEED to change it)")
    outcome = run_differential(spark, SEED, transactions=80, checkpoints=2, configs=CONFIGS, postgres=postgres,
                               root=tmp_path, out=out, large_rows=250, preload=40, chunk_rows=40)
    assert "40 transactions before the slots" in out.getvalue()
    print(out.getvalue())
    assert outcome.ok, "\n".join(outcome.failures)
    assert len(outcome.checkpoints) == 2
    last = outcome.checkpoints[-1]
    assert set(last) == set(CONFIGS)
    # Every configuration compared every workload table, and the tables are not trivially empty.
    for name, checks in last.items():
        assert {c.name for c in checks} >= {"diff.pk_t", "diff.full_t", "diff.idx_t", "diff.comp_t"}, name
        assert sum(c.source_rows for c in checks) > 0, name


@pytest.mark.skipif(os.environ.get("CDC_APPLY_DIFF_HISTORY") != "1",
                    reason="minutes on 2 cores: set CDC_APPLY_DIFF_HISTORY=1 (make soak SOAK_HISTORY=1 runs it large)")
@pytest.mark.parametrize("preload", [0, 40])
def test_history_tables_hold_every_source_state_and_read_as_of_equals_the_source(spark, postgres, tmp_path, preload):
    """History on for every table, one configuration (streamed, parallel): at each checkpoint every
    history table holds the source's state after each transaction, and read_as_of equals PostgreSQL
    (from history now, by time travel at the checkpoint before). With ``preload`` the slot is made with
    an initial snapshot after states were recorded: history holds them from its consistent point on.
    Opt-in: the history capture's tests check the same against the reference applier in the default run."""
    out = io.StringIO()
    outcome = run_differential(spark, SEED, transactions=60, checkpoints=2, configs=("v4_parallel",), postgres=postgres,
                               root=tmp_path, out=out, large_rows=150, history=True, preload=preload, chunk_rows=40)
    print(out.getvalue())
    assert outcome.ok, "\n".join(outcome.failures)
    assert out.getvalue().count("history and read_as_of checked") == 2


def test_silver_with_masks_exclusions_and_soft_deletes_less_its_marked_rows_equals_the_source_at_every_checkpoint(
        spark, postgres, tmp_path, monkeypatch):
    """Columns excluded, hashed (a composite key's text column among them) and redacted, and every table's
    deletes soft (``deletes = "soft"``), through the whole workload — TOAST, key moves, keyless duplicates,
    truncates, initial snapshots in key ranges: silver, its marked rows read as absent, equals PostgreSQL
    masked by the same rules (docs/MASKING.md) at each checkpoint, and rows are marked, not removed."""
    monkeypatch.setenv("CDC_APPLY_MASK_SALT", "differential-salt")
    rules = {"tables": {"diff.pk_t": {"exclude_columns": ["f"], "mask_columns": {"v": "sha256", "doc": "redact"}},
                        "diff.comp_t": {"mask_columns": {"k2": "sha256", "d": "sha256"}},
                        "diff.full_t": {"mask_columns": {"b": "sha256"}, "exclude_columns": ["c"]}}}
    out = io.StringIO()
    configs = ("v1_binary", "v4_parallel")
    outcome = run_differential(spark, SEED, transactions=80, checkpoints=2, configs=configs, postgres=postgres,
                               root=tmp_path, out=out, large_rows=150, preload=40, chunk_rows=40, rules=rules,
                               soft_deletes=True)
    print(out.getvalue())
    assert outcome.ok, "\n".join(outcome.failures)
    for name in configs:
        checks = {c.name: c for c in outcome.checkpoints[-1][name]}
        assert all(checks[t].source_rows > 0 for t in ("diff.pk_t", "diff.comp_t", "diff.full_t")), name
    marked = sum(spark.read.format("delta").load(str(tmp_path / "silver" / name / "diff" / table))
                 .where("_cdc_deleted").count() for name in configs for table in ("pk_t", "full_t"))
    assert marked > 0
