"""`cdc-apply verify`'s options reach the run; the `[verify]` section is checked."""

from __future__ import annotations

import pytest

from cdc_apply.cli.main import build_parser
from cdc_apply.config import parse_config
from cdc_apply.errors import ConfigError

BASE = {"bronze": {"path": "/tmp/b"}, "silver": {"path": "/tmp/s"}, "state": {"path": "/tmp/st"}}


def test_the_verify_command_takes_its_options():
    args = build_parser().parse_args(["verify", "--config", "f.toml", "--table", "public.a", "--table", "public.b",
                                      "--json", "--max-source-rows-per-second", "5000", "--range-rows", "1000"])
    assert (args.table, args.json, args.max_source_rows_per_second, args.range_rows) == (
        ["public.a", "public.b"], True, 5000.0, 1000)
    assert args.wait_seconds is None and not args.no_record and not args.repair
    assert build_parser().parse_args(["verify", "--config", "f.toml", "--repair"]).repair


def test_the_verify_section_bounds_the_source_reads():
    config = parse_config({**BASE, "verify": {"max_source_rows_per_second": 20000, "range_rows": 500}})
    assert (config.verify.max_source_rows_per_second, config.verify.range_rows) == (20000.0, 500)
    assert parse_config(BASE).verify.max_source_rows_per_second is None


def test_a_rate_of_zero_is_refused():
    with pytest.raises(ConfigError, match="verify.max_source_rows_per_second"):
        parse_config({**BASE, "verify": {"max_source_rows_per_second": 0}})
