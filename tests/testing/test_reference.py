"""The reference applier's rules where the Spark job is checked against it."""

from __future__ import annotations

from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder


def test_an_update_of_a_keyless_row_it_lacks_keeps_unchanged_toast_from_the_old_row():
    b = StreamBuilder()
    docs = b.relation("public", "docs", [("n", "int4", True), ("body", "text", True)], replica_identity="f")
    with b.transaction() as tx:       # REPLICA IDENTITY FULL sends the old row whole, TOAST included
        tx.update(docs, {"n": 2, "body": UNCHANGED_TOAST}, old={"n": 1, "body": "long text"})
    ref = ReferenceApplier()
    for _, seq, _, payload in b.rows():
        ref.feed(seq, payload)
    assert ref.rows("public.docs") == [{"n": "2", "body": "long text"}]
