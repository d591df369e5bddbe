"""The pure half of the differential test: one workload as pgoutput and as GaussDB records, same tables.

The GaussDB payloads go through decode -> transcode -> pgoutput encode and the
reference applier; the pgoutput stream goes straight to another reference
applier. Both must equal the simulated database's final state (the GaussDB side in
the columns its records described: they carry no DDL), however the
GaussDB records were cut into payloads and whether or not the keys come from
configuration. The transcoded stream must also assemble cleanly.
"""

from __future__ import annotations

import random

from gaussdb_workload import Workload, build, sort_rows  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_apply.gaussdb import GaussdbTranscoder, decode_gaussdb_payload
from cdc_apply.pgoutput.encoder import encode
from cdc_apply.planning.assemble import assemble_transactions
from cdc_apply.planning.state import SourceState
from cdc_apply.testing.reference import ReferenceApplier


def apply_pgoutput(workload: Workload) -> ReferenceApplier:
    ref = ReferenceApplier()
    for _, seq, _, payload in workload.builder.rows():
        ref.feed(seq, payload)
    return ref


def transcode_all(workload: Workload, split_seed: int, **options) -> tuple[list[bytes], list, list]:
    """(pgoutput payloads, TransactionInfo list, per-call message counts) for the workload's GaussDB payloads."""
    transcoder = GaussdbTranscoder(**options)
    out, txns, counts = [], [], []
    for payload in workload.payloads(random.Random(split_seed)):
        result = transcoder.transcode(decode_gaussdb_payload(payload))
        out.extend(encode(msg) for msg in result.pgoutput())
        txns.extend(result.transactions)
        counts.append(len(result.messages))
    assert not transcoder.pending
    return out, txns, counts


def apply_transcoded(payloads: list[bytes]) -> ReferenceApplier:
    ref = ReferenceApplier()
    for seq, payload in enumerate(payloads):
        ref.feed(seq, payload)
    return ref


@settings(print_blob=True, max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 2**32), st.booleans())
def test_same_tables_from_pgoutput_and_gaussdb(seed, split_seed, configured):
    workload = build(seed)
    keys = {"public.accounts": ["id"], "shop.orders": ["region", "no"]} if configured else None
    payloads, txns, _ = transcode_all(workload, split_seed, keys=keys)
    direct, transcoded = apply_pgoutput(workload), apply_transcoded(payloads)
    for name, rows in workload.expected.items():
        assert sort_rows(direct.rows(name)) == sort_rows(rows), name
        assert sort_rows(transcoded.rows(name)) == sort_rows(workload.expected_gaussdb[name]), name
    assert [t.user_name for t in txns] == workload.users
    assert [t.xid for t in txns] == workload.xids
    assert [t.commit_lsn for t in txns] == sorted(t.commit_lsn for t in txns)

    assembly = assemble_transactions(SourceState(), [(seq, 0, p) for seq, p in enumerate(payloads)],
                                     len(payloads) - 1, source="gauss")
    assert [t.commit_lsn for t in assembly.committed] == [t.commit_lsn for t in txns]
    assert assembly.state.open_txn is None


@settings(print_blob=True, max_examples=15, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 2**32), st.integers(0, 2**32))
def test_payload_boundaries_do_not_change_the_messages(seed, split_a, split_b):
    workload = build(seed, transactions=15)
    a, _, _ = transcode_all(workload, split_a)
    b, _, _ = transcode_all(workload, split_b)
    assert a == b


def test_excluded_users_vanish_from_the_transcoded_tables():
    workload = build(7, transactions=30)
    payloads, txns, _ = transcode_all(workload, 1, exclude_users=frozenset({"etl"}))
    kept = apply_transcoded(payloads)
    assert {t.user_name for t in txns if t.excluded} == {"etl"}
    assert not any(t.begin_index is not None for t in txns if t.excluded)
    everything = apply_transcoded(transcode_all(workload, 1)[0])
    assert "etl" in workload.users
    assert any(sort_rows(kept.rows(n)) != sort_rows(everything.rows(n)) for n in workload.expected)
