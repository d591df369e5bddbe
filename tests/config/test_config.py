from __future__ import annotations

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
])
def test_a_bad_setting_is_a_config_error_naming_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.context["key"] == key


def test_allow_and_deny_lists_take_wildcards_and_comma_strings():
    config = parse_config({**MINIMAL, "apply": {"tables": "public.t1,*.t3,my_schema.*", "exclude_tables": ["*.tmp_*"]}})
    assert [config.table_selected(n) for n in ("public.t1", "x.t3", "my_schema.a", "public.t2", "my_schema.tmp_1")] == [
        True, True, True, False, False]


def test_a_missing_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="not found") as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.context["file"].endswith("nope.toml")
