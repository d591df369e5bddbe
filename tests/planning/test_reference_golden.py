"""The reference applier against PostgreSQL's own table contents, for every golden capture.

This runs the decoder, the type converters and the transaction semantics over
real pgoutput bytes of protocol versions 1-4 (text and binary, streamed,
two-phase) and checks every table at every checkpoint.
"""

from __future__ import annotations

import pytest
from golden.loader import list_configs, list_scenarios, load_capture, load_expected
from golden.oracle import canonical, column_types, convert_one, options_for, recast_one, skipped_columns, typed_expected

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import decode_message, parse_lsn
from cdc_apply.testing.reference import ReferenceApplier

CASES = [(s, c) for s in list_scenarios() for c in list_configs(s)]
# Documented policy: a multi-dimensional array value in a column not configured with its dimensions (the
# reference applier runs with none) is a DecodeError (quarantined or failing the batch).
REJECTED_TABLES = {"public.types_array_multi"}
DECIDING = {ord("C"), ord("c"), ord("K")}


def _check(ref: ReferenceApplier, scenario: str, checkpoint: dict, at_seq: int, binary: bool) -> None:
    for name, table in checkpoint["tables"].items():
        if name in REJECTED_TABLES:
            continue
        names = [c["name"] for c in table["columns"]]
        types = column_types(table, ref.history.types, options_for(scenario))
        ours = [tuple(r.get(n) for n in names) for r in ref.rows(name, at_seq)]
        skip = skipped_columns(scenario, name, names, binary)
        assert canonical(ours, skip) == canonical(typed_expected(table, types), skip), (
            f"{scenario} {name} differs at checkpoint {checkpoint['name']}")


@pytest.mark.parametrize("scenario,config", CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_the_reference_applier_reproduces_every_checkpoint(scenario, config):
    options = options_for(scenario)
    rejected = []

    def convert(col, types, raw):
        try:
            return convert_one(col, types, raw, options)
        except DecodeError as err:
            rejected.append(str(err))
            return None

    ref = ReferenceApplier(convert=convert, recast=lambda value, col, types: recast_one(value, col, types, options))
    checkpoints = iter(load_expected(scenario))
    current = next(checkpoints, None)
    decided_at = 0  # seq of the last Commit / Stream Commit / Commit Prepared fed
    for seq, lsn, xid, payload in load_capture(scenario, config):
        if payload[0] in DECIDING:
            commit_lsn = decode_message(payload).commit_lsn  # these never depend on stream state
            while current is not None and commit_lsn > parse_lsn(current["lsn"]):
                _check(ref, scenario, current, decided_at + 1, "binary" in config)
                current = next(checkpoints, None)
            decided_at = seq
        ref.feed(seq, payload)
    while current is not None:
        _check(ref, scenario, current, decided_at + 1, "binary" in config)
        current = next(checkpoints, None)
    assert all("-dimensional array in a column of 1 dimension" in e for e in rejected), rejected[:3]
    assert bool(rejected) == (scenario == "types")
