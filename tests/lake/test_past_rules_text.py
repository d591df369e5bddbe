"""What ``cdc_apply.lake.silver.past_rules`` records on a table and prints, without Spark: the rules as a
table property and the run's one line per table."""

from __future__ import annotations

from cdc_apply.lake.silver.past_rules import (
    PastResult,
    created_properties,
    decode_applied,
    describe,
    encode_applied,
    rules_applied,
)
from cdc_apply.planning.tables import NO_RULES, ColumnRules

RULES = ColumnRules(frozenset({7}), ((3, "sha256"), (5, "redact")))


def test_the_recorded_rules_name_each_lineage_with_its_mask_or_exclude():
    assert rules_applied(RULES) == {3: "sha256", 5: "redact", 7: "exclude"}


def test_the_recorded_rules_read_back_as_written():
    assert decode_applied(encode_applied(rules_applied(RULES))) == rules_applied(RULES)


def test_a_property_that_is_not_the_recorded_rules_reads_as_none():
    assert [decode_applied(t) for t in (None, "", "not json", "[1, 2]", '{"x": "sha256"}')] == [None] * 5


def test_a_table_created_under_rules_records_them_and_one_without_rules_records_nothing():
    assert decode_applied(created_properties(RULES)["cdc_apply.masks_applied"]) == rules_applied(RULES)
    assert created_properties(NO_RULES) == {}


def test_the_run_names_each_column_its_rows_and_versions_and_what_vacuum_must_still_remove():
    silver = PastResult({"email": ("sha256", 4)}, ["pw"], "interval 2 days")
    history = PastResult({"email": ("sha256", 9)}, ["pw"], "interval 2 days")
    line = describe("public.t", silver, history)
    assert line == ("cdc_apply: masked (sha256) public.t.email: 4 rows in silver and 9 versions in history; dropped "
                    "the excluded column public.t.pw in silver and history; earlier Delta versions (time travel) and "
                    "the change data feed of these commits still hold the clear values until VACUUM removes their "
                    "files (retention interval 2 days, delta.deletedFileRetentionDuration)")


def test_a_table_the_rules_changed_nothing_in_prints_nothing():
    assert describe("public.t", None, None) is None
