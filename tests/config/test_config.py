from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdc_apply.config import load_config, parse_config
from cdc_apply.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {"bronze": {"path": "b"}, "silver": {"path": "s"}, "state": {"path": "st"}}


def test_the_example_configuration_loads_with_every_option():
    config = load_config(ROOT / "conf" / "example.toml")
    assert config.pipeline == "shop"
    assert config.bronze.path == str((ROOT / "demo-data" / "bronze").resolve())
    assert config.apply.on_error == "fail" and config.source.streaming == "parallel"


def test_the_example_loads_with_every_commented_option_enabled():
    import tomllib
    from dataclasses import fields

    from cdc_apply import config as c

    # A commented line is "# key = value" or "# [section]"; the alternatives to a path replace it.
    replaced = {"bronze": "path", "silver": "path", "state": "path"}
    lines, section = [], None
    example = (ROOT / "conf" / "example.toml").read_text()
    for line in example.splitlines():
        enabled = re.sub(r"^# (?=\[|[a-z_]+ = )", "", line)
        header = re.match(r"^\[([^\]]+)\]", enabled)
        section = header.group(1).split(".")[0] if header else section
        key = re.match(r"^([a-z_]+) = ", enabled)
        if key and section in replaced and key.group(1) == replaced[section] and not line.startswith("#"):
            continue
        lines.append(enabled)
    text = "\n".join(lines)
    config = parse_config(tomllib.loads(text), ROOT / "conf")
    assert config.bronze.table == "main.cdc.bronze" and config.silver.table_template
    assert config.state.schema == "main.cdc" and config.key_for("public.audit") == ("id",)
    assert config.history_for("public.audit") == c.HistorySpec(("status",)) and config.silver.history_suffix
    assert config.format_of("gaussdb_src") == "gaussdb" and config.bronze.max_bytes_per_trigger == "1g"
    assert config.soft_deletes_for("public.audit") and not config.soft_deletes_for("public.orders")
    assert config.metrics.land_port == 9187 and config.metrics.apply_port == 9188
    # ... and the example names every option of every section.
    for name, cls in [("bronze", c.BronzeConfig), ("silver", c.SilverConfig), ("state", c.StateConfig),
                      ("apply", c.ApplyConfig), ("source", c.SourceConfig), ("land", c.LandConfig),
                      ("gaussdb", c.GaussdbConfig), ("verify", c.VerifyConfig),
                      ("metrics", c.MetricsConfig)]:
        for f in fields(cls):
            assert re.search(rf"^(# )?{f.name} = ", example, re.M), f"{name}.{f.name} is not in conf/example.toml"


def test_three_paths_are_enough_and_everything_else_has_a_default(tmp_path):
    config = parse_config(MINIMAL, tmp_path)
    assert config.silver.path == str(tmp_path / "s")
    assert config.apply.parallelism >= 1 and config.pipeline == "st"
    assert config.checkpoint_location == str(tmp_path / "st") + "/checkpoint"


@pytest.mark.parametrize("raw,key", [
    ({**MINIMAL, "silver": {"path": "s", "pathh": "x"}}, "silver.pathh"),
    ({**MINIMAL, "apply": {"on_error": "ignore"}}, "apply.on_error"),
    ({**MINIMAL, "apply": {"parallelism": "4"}}, "apply.parallelism"),
    ({"bronze": {"path": "b"}, "silver": {"path": "s"}}, "state.path"),
    ({**MINIMAL, "bronze": {}}, "bronze.path"),
    ({**MINIMAL, "surprise": {}}, "surprise"),
    ({**MINIMAL, "tables": {"public.t": {"keys": ["id"]}}}, "tables.public.t.keys"),
    ({**MINIMAL, "source": {"proto_version": 7}}, "source.proto_version"),
    ({**MINIMAL, "silver": {"path": "s", "rewrite_share": -0.5}}, "silver.rewrite_share"),
    ({**MINIMAL, "silver": {"path": "s", "rewrite_table_bytes": -1}}, "silver.rewrite_table_bytes"),
    ({**MINIMAL, "silver": {"path": "s", "rewrite_table_bytes": "16M"}}, "silver.rewrite_table_bytes"),
    ({**MINIMAL, "apply": {"trigger_interval": "soon"}}, "apply.trigger_interval"),
    ({**MINIMAL, "silver": {"path": "b"}}, "bronze.path"),
    ({**MINIMAL, "state": {"path": "s/_cdc"}}, "silver.path"),
    ({**MINIMAL, "state": {"path": "b/.."}}, "bronze.path"),
    ({**MINIMAL, "source": {"snapshot_batch_bytes": 0}}, "source.snapshot_batch_bytes"),
    ({**MINIMAL, "source": {"snapshot_check_seconds": float("inf")}}, "source.snapshot_check_seconds"),
    ({**MINIMAL, "land": {"batch_seconds": float("nan")}}, "land.batch_seconds"),
    ({**MINIMAL, "land": {"batch_messages": 0}}, "land.batch_messages"),
    ({**MINIMAL, "land": {"idle_exit_seconds": -1.0}}, "land.idle_exit_seconds"),
    ({**MINIMAL, "bronze": {"path": "b", "max_files_per_trigger": 0}}, "bronze.max_files_per_trigger"),
    ({**MINIMAL, "silver": {"path": "s", "history_suffix": "_hist\x00"}}, "silver.history_suffix"),
    ({**MINIMAL, "silver": {"path": "s", "metadata_prefix": "_\x00"}}, "silver.metadata_prefix"),
    ({**MINIMAL, "apply": {"tables": ["public.\x00"]}}, "apply.tables"),
    ({**MINIMAL, "pipeline": "p\x00"}, "pipeline"),
    ({**MINIMAL, "tables": {"public.t": {"deletes": "maybe"}}}, "tables.public.t.deletes"),
    ({**MINIMAL, "tables": {"public.t": {"deletes": True}}}, "tables.public.t.deletes"),
    ({**MINIMAL, "silver": {"path": "s", "soft_deletes": 1}}, "silver.soft_deletes"),
    ({**MINIMAL, "silver": {"path": "s", "readers": "polars"}}, "silver.readers"),
    ({**MINIMAL, "silver": {"path": "s", "readers": True}}, "silver.readers"),
    ({**MINIMAL, "metrics": {"land_port": 70000}}, "metrics.land_port"),
    ({**MINIMAL, "metrics": {"apply_port": "9188"}}, "metrics.apply_port"),
    ({**MINIMAL, "metrics": {"address": " "}}, "metrics.address"),
    ({**MINIMAL, "metrics": {"port": 9187}}, "metrics.port"),
])
def test_a_bad_setting_is_a_config_error_naming_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.context["key"] == key


def test_silver_readers_is_spark_unless_delta_rs_is_chosen():
    assert parse_config(MINIMAL).silver.readers == "spark"
    assert parse_config({**MINIMAL, "silver": {"path": "s", "readers": "delta-rs"}}).silver.readers == "delta-rs"


def test_allow_and_deny_lists_take_wildcards_and_comma_strings():
    config = parse_config({**MINIMAL, "apply": {"tables": "public.t1,*.t3,my_schema.*", "exclude_tables": ["*.tmp_*"]}})
    assert [config.table_selected(n) for n in ("public.t1", "x.t3", "my_schema.a", "public.t2", "my_schema.tmp_1")] == [
        True, True, True, False, False]


def test_a_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="not found") as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.context["file"].endswith("nope.toml")


@pytest.mark.parametrize("interval", ["10 seconds", "1 minute", "500 milliseconds", "interval 2 minutes", "0.5 s"])
def test_trigger_intervals_spark_understands_are_accepted(interval):
    assert parse_config({**MINIMAL, "apply": {"trigger_interval": interval}}).apply.trigger_interval == interval


def test_the_checkpoint_may_live_under_the_state_folder(tmp_path):
    config = parse_config({**MINIMAL, "state": {"path": "st", "checkpoint": "st/cp"}}, tmp_path)
    assert config.checkpoint_location == str(tmp_path / "st" / "cp")


def test_a_file_that_is_not_utf8_names_the_file(tmp_path):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'pipeline = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        load_config(bad)
    assert info.value.context["file"] == str(bad)


def test_an_unreadable_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_config(tmp_path)
    assert info.value.context["file"] == str(tmp_path)


def test_soft_deletes_follow_silver_wildcards_unless_the_table_decides():
    config = parse_config({**MINIMAL, "silver": {"path": "s", "soft_deletes": ["public.*"]},
                           "tables": {"public.kept": {"deletes": "hard"}, "other.t": {"deletes": "soft"}}})
    assert [config.soft_deletes_for(n) for n in ("public.a", "public.kept", "other.t", "other.u")] == [
        True, False, True, False]
    assert config.tables["other.t"].deletes == "soft" and not parse_config(MINIMAL).soft_deletes_for("public.a")


def test_array_dimensions_name_each_tables_array_columns_for_the_type_map():
    config = parse_config({**MINIMAL, "tables": {"public.grid": {"array_dimensions": {"cells": 2, "cube": 3}},
                                                 "public.flat": {}}})
    assert config.array_dimensions() == (("public.grid", "cells", 2), ("public.grid", "cube", 3))


@pytest.mark.parametrize("dimensions", [0, 7])
def test_array_dimensions_outside_what_postgresql_allows_are_a_config_error_naming_the_key(dimensions):
    with pytest.raises(ConfigError, match="1 to 6 dimensions") as info:
        parse_config({**MINIMAL, "tables": {"public.grid": {"array_dimensions": {"cells": dimensions}}}})
    assert info.value.context["key"] == "tables.public.grid.array_dimensions"


@pytest.mark.parametrize("value", [{"cells": "2"}, {"cells": True}, ["cells"], 2])
def test_array_dimensions_that_are_not_a_table_of_counts_are_a_config_error_naming_the_key(value):
    with pytest.raises(ConfigError, match="column = integer") as info:
        parse_config({**MINIMAL, "tables": {"public.grid": {"array_dimensions": value}}})
    assert info.value.context["key"] == "tables.public.grid.array_dimensions"
