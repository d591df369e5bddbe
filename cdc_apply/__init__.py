"""cdc_apply: PostgreSQL logical replication (pgoutput) to Delta Lake on Spark.

The Python API (details in :mod:`cdc_apply.api`)::

    import cdc_apply

    spark = cdc_apply.spark_session()                  # the session you have, or one with Delta
    reports = cdc_apply.apply(spark, "pipeline.toml")  # bronze -> silver, once; one report per batch
    entries = cdc_apply.status(spark, "pipeline.toml") # per source: applied seq, lag, health
    summary = cdc_apply.land("pipeline.toml")          # PostgreSQL slot -> bronze, until idle

``cdc_apply.pgoutput`` and the planning core import no Spark; importing this package does not
start or import Spark either.
"""

from __future__ import annotations

from typing import Any

# ``apply`` and ``land`` below are functions named like the subpackages cdc_apply.apply (the planning
# core) and cdc_apply.land (the lander). Importing a subpackage for the first time sets the parent's
# attribute of that name to the module, which would replace the function; both are imported here,
# before the functions are bound, so later imports (``from cdc_apply.apply.plan import ...``) find them
# in sys.modules and leave the names alone. Both are plain-Python packages of one docstring.
import cdc_apply.apply as _planning_package  # noqa: F401
import cdc_apply.land as _lander_package  # noqa: F401
from cdc_apply.api import apply, exit_code, land, load_config, status
from cdc_apply.errors import (
    ApplyError,
    CdcApplyError,
    ConfigError,
    DecodeError,
    LandError,
    SchemaError,
    SetupError,
    StateError,
)
from cdc_apply.log import configure_logging

__version__ = "0.1.0"


def spark_session(app_name: str = "cdc_apply", **conf: Any):
    """Return a classic Spark session with Delta Lake (see :func:`cdc_apply.spark.session.spark_session`)."""
    from cdc_apply.spark.session import spark_session as _build

    return _build(app_name, **conf)


__all__ = [
    "ApplyError",
    "CdcApplyError",
    "ConfigError",
    "DecodeError",
    "LandError",
    "SchemaError",
    "SetupError",
    "StateError",
    "__version__",
    "apply",
    "configure_logging",
    "exit_code",
    "land",
    "load_config",
    "spark_session",
    "status",
]
