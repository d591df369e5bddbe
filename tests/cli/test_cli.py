"""The command's surface and the API's plumbing that need no Spark: --version, exit codes, logging,
configuration from a dict or a file, the pytest plugin's registration and the Databricks bundle."""

from __future__ import annotations

import io
import json
import logging
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import cdc_apply
from cdc_apply.cli import main as cli
from cdc_apply.config import Config, as_config, config_from_dict
from cdc_apply.errors import ConfigError
from cdc_apply.log import PRINTED, LineLog, configure_logging

REPO = Path(__file__).resolve().parents[2]


def test_the_package_version_is_the_one_pyproject_declares():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert cdc_apply.__version__ == project["version"]


def test_the_console_script_exits_with_a_failing_code_and_returns_on_success(monkeypatch):
    monkeypatch.setattr(cli, "main", lambda argv=None: 4)
    with pytest.raises(SystemExit) as exit_:
        cli.run()
    assert exit_.value.code == 4
    monkeypatch.setattr(cli, "main", lambda argv=None: 0)
    assert cli.run() is None       # a wheel task calling the entry point sees a normal return


def test_a_cdc_apply_error_exits_2_with_one_line_on_stderr(capsys, tmp_path):
    code = cli.main(["status", "--config", str(tmp_path / "missing.toml")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[0].startswith("cdc-apply: error: invalid configuration: configuration file not found")
    assert err.count("configuration file not found") == 1     # the log record is not shown a second time


def test_each_line_written_to_a_line_log_is_a_record_on_its_layers_logger(caplog):
    copy = io.StringIO()
    stream = LineLog("cdc_apply.apply", copy=copy)
    with caplog.at_level(logging.INFO, logger="cdc_apply.apply"):
        print("batch 0 (v1) | 3 msgs", file=stream, flush=True)
        stream.write("partial")
        stream.flush()
    records = [r for r in caplog.records if r.name == "cdc_apply.apply"]
    assert [r.getMessage() for r in records] == ["batch 0 (v1) | 3 msgs", "partial"]
    assert all(getattr(r, PRINTED) for r in records)
    assert copy.getvalue() == "batch 0 (v1) | 3 msgs\npartial"


def test_lines_already_printed_are_left_out_of_the_commands_log_handler():
    shown = io.StringIO()
    configure_logging("INFO", stream=shown, fmt="%(name)s: %(message)s", skip_printed=True, propagate=True)
    try:
        LineLog("cdc_apply.apply", copy=io.StringIO()).write("batch 0 (v1)\n")
        LineLog("cdc_apply.land").write("[land shop] batch 0\n")
        logging.getLogger("cdc_apply.spark").info("Spark session from spark-submit")
    finally:
        configure_logging("WARNING", stream=io.StringIO(), propagate=True)
    assert shown.getvalue().splitlines() == ["cdc_apply.land: [land shop] batch 0",
                                             "cdc_apply.spark: Spark session from spark-submit"]


def test_configuring_logging_twice_keeps_one_handler():
    first = configure_logging("INFO", stream=io.StringIO(), propagate=True)
    second = configure_logging("INFO", stream=io.StringIO(), propagate=True)
    handlers = logging.getLogger("cdc_apply").handlers
    assert second in handlers and first not in handlers
    configure_logging("WARNING", stream=io.StringIO(), propagate=True)


def test_the_api_functions_apply_and_land_are_not_shadowed_by_any_subpackage():
    import cdc_apply.lake.pipeline  # noqa: F401
    import cdc_apply.lander.lander as lander_module
    import cdc_apply.planning.plan  # noqa: F401 - importing every layer is the point

    assert cdc_apply.apply.__module__ == "cdc_apply.api" and cdc_apply.land.__module__ == "cdc_apply.api"
    assert lander_module.__name__ == "cdc_apply.lander.lander"
    assert callable(cdc_apply.status) and callable(cdc_apply.load_config)


def test_a_config_from_a_dict_a_toml_file_or_a_config_is_the_same(tmp_path):
    raw = {"bronze": {"path": "b"}, "silver": {"path": "s"}, "state": {"path": "st"},
           "apply": {"on_error": "quarantine"}}
    file = tmp_path / "pipeline.toml"
    file.write_text('[bronze]\npath = "b"\n[silver]\npath = "s"\n[state]\npath = "st"\n'
                    '[apply]\non_error = "quarantine"\n')
    from_file = as_config(file)
    from_dict = config_from_dict(raw, tmp_path)
    assert from_dict == Config(**{**from_file.__dict__, "origin_file": None})
    assert as_config(from_dict) is from_dict
    assert cdc_apply.load_config(str(file)).bronze.path == str(tmp_path / "b")


def test_a_dict_config_is_checked_like_a_file_and_other_types_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key .*\[key=silver\.pathh\]"):
        as_config({"bronze": {"path": "b"}, "silver": {"pathh": "s"}, "state": {"path": "st"}})
    with pytest.raises(ConfigError, match="expected a Config, a dict or the path of a TOML file, got int"):
        as_config(3)


def test_the_pytest_plugin_is_registered_under_pytest11():
    plugins = {e.name: e.value for e in metadata.entry_points(group="pytest11")}
    assert plugins.get("cdc_apply") == "cdc_apply.testing.pytest_plugin", \
        "the editable install predates the entry point: run `make setup`"


def test_the_databricks_bundle_runs_the_console_script_with_arguments_the_command_accepts():
    bundle = (REPO / "jobs" / "databricks.yml").read_text()
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(re.findall(r"package_name: (\S+)", bundle)) == {"cdc_apply"}
    assert set(re.findall(r"entry_point: (\S+)", bundle)) == {"cdc-apply"} <= scripts.keys()
    tasks = [json.loads(p.replace("${workspace.file_path}", "/Workspace/x"))
             for p in re.findall(r"parameters: (\[.*\])", bundle)]
    assert [t[0] for t in tasks] == ["apply", "status"]
    parser = cli.build_parser()
    for params in tasks:
        args = parser.parse_args(params)
        assert args.config == "/Workspace/x/pipeline.toml"
    assert parser.parse_args(tasks[0]).once
    config = tomllib.loads((REPO / "jobs" / "pipeline.toml").read_text())
    parsed = config_from_dict(config)
    assert parsed.silver.table_template and parsed.state.schema and parsed.state.checkpoint
