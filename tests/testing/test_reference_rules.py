"""The apply rules of the apply-rules capture (tests/lake/rules_capture.py), stated on the reference applier.

Each rule has its own table in the capture; here each table's rows are what the README's contract leaves,
in plain Python. tests/lake/test_apply_rules.py applies the same capture with Spark in three
micro-batches and asserts silver equals the reference table for table, so these expectations hold
for silver too."""

from __future__ import annotations

import pytest

from cdc_apply.testing.reference import ReferenceApplier
from tests.lake.rules_capture import BIG, reference_rules


@pytest.fixture(scope="module")
def reference() -> ReferenceApplier:
    return reference_rules()


def _rows(ref: ReferenceApplier, table: str, *columns: str) -> list[tuple]:
    return sorted(tuple(row[c] for c in columns) for row in ref.rows(table))


def test_inserts_updates_and_deletes_leave_the_current_rows(reference):
    assert _rows(reference, "public.basic", "id", "name") == [
        ("1", "one"), ("10", "spans batches"), ("11", "after"), ("3", "n3"), ("4", "n4")]


def test_unchanged_toast_keeps_the_stored_value_from_before_or_from_the_same_transaction(reference):
    assert _rows(reference, "public.toasty", "id", "n", "doc") == [
        ("1", "10", BIG + "1"), ("2", "2", BIG + "2"), ("3", "30", BIG + "3")]


def test_a_key_change_moves_the_row_and_keeps_its_unchanged_toast(reference):
    assert _rows(reference, "public.moves", "id", "doc") == [("10", "m1"), ("20", "new"), ("30", "m3")]


def test_full_identity_without_a_key_removes_one_of_two_exact_duplicates(reference):
    assert _rows(reference, "public.dups", "a", "b") == [("1", "x"), ("3", "y")]


def test_truncate_empties_every_listed_table_and_later_changes_apply(reference):
    assert _rows(reference, "public.parent", "id") == [("5",)]
    assert _rows(reference, "public.child", "id") == []


def test_streamed_transactions_apply_at_commit_without_aborted_subtransactions_or_aborted_streams(reference):
    assert _rows(reference, "public.streamed", "id", "v") == [("1", "s1"), ("3", "s3")]


def test_a_prepared_transaction_applies_at_commit_prepared_and_a_rolled_back_one_never(reference):
    assert _rows(reference, "public.twophase", "id", "v") == [("1", "prepared then committed")]


def test_names_that_need_quoting_are_tables_and_columns_like_any_other(reference):
    assert _rows(reference, 'we/ird%ns.Mixed "Case", tbl', "id", "a b,c", "ünï") == [("1", "w2", "11")]


def test_every_table_of_the_capture_has_rows_or_was_truncated(reference):
    assert reference.table_names() == sorted([
        "public.basic", "public.toasty", "public.moves", "public.dups", "public.parent", "public.child",
        "public.streamed", "public.twophase", 'we/ird%ns.Mixed "Case", tbl'])


def test_a_streamed_and_a_prepared_transaction_are_committed_once_each_among_plain_ones(reference):
    kinds = [kind for _, kind in reference.committed]
    assert kinds.count("streamed") == 1 and kinds.count("prepared") == 1
    assert set(kinds) == {"plain", "streamed", "prepared"}


def test_logical_decoding_messages_are_kept_transactional_at_commit_and_the_others_at_once(reference):
    said = [(msg.prefix, msg.transactional, bytes(msg.content)) for msg in reference.messages]
    assert said == [("audit", False, b"outside"), ("audit", True, b"inside")]
