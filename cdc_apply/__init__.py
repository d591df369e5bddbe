"""cdc_apply: PostgreSQL logical replication (pgoutput) to Delta Lake on Spark.

The Python API (details in :mod:`cdc_apply.api`)::

    import cdc_apply

    spark = cdc_apply.spark_session()                  # the session you have, or one with Delta
    reports = cdc_apply.apply(spark, "pipeline.toml")  # bronze -> silver, once; one report per batch
    entries = cdc_apply.status(spark, "pipeline.toml") # per source: applied seq, lag, health
    summary = cdc_apply.land("pipeline.toml")          # PostgreSQL slot -> bronze, until idle
    as_of = cdc_apply.read_as_of(spark, "pipeline.toml", "16/B374D848", ["public.orders"])  # docs/HISTORY.md
    as_of["public.orders"].show()                      # silver as of one source commit
    run = cdc_apply.verify(spark, "pipeline.toml")     # silver vs the live source at one point (docs/VERIFY.md)

``as_of_views`` registers the same as SQL views, ``register_lsn_functions`` the SQL functions
``cdc_lsn_text`` / ``cdc_lsn`` (BIGINT LSN <-> PostgreSQL's ``X/Y``).

``cdc_apply.pgoutput`` and the planning core import no Spark; importing this package does not
start or import Spark either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdc_apply.api import (
    apply,
    as_of_views,
    exit_code,
    forget,
    land,
    load_config,
    read_as_of,
    register_lsn_functions,
    status,
    verify,
)
from cdc_apply.errors import (
    ApplyError,
    AsOfError,
    BronzeError,
    CdcApplyError,
    ConfigError,
    DecodeError,
    ForgetError,
    LandError,
    PathError,
    SchemaError,
    SetupError,
    StateError,
    StopRequested,
    VerifyError,
)
from cdc_apply.log import configure_logging

if TYPE_CHECKING:

    from cdc_apply.forgetting.run import Forgetting
    from cdc_apply.lake.books.status_rules import StatusEntry
    from cdc_apply.lake.report import BatchReport
    from cdc_apply.lander.summary import LandSummary
    from cdc_apply.spark.connect import spark_session
    from cdc_apply.verification.run import Verification

# The result types, imported when first named (``cdc_apply.BatchReport``): their modules bring pyarrow and
# the planning core, which importing the package does not.
_RESULT_TYPES = {
    "BatchReport": "cdc_apply.lake.report",                # apply(): one per batch
    "StatusEntry": "cdc_apply.lake.books.status_rules",    # status(): one per source
    "Verification": "cdc_apply.verification.run",          # verify()
    "Forgetting": "cdc_apply.forgetting.run",              # forget()
    "LandSummary": "cdc_apply.lander.summary",             # land()
    "spark_session": "cdc_apply.spark.connect",            # the session: classic or Spark Connect
}


def __getattr__(name: str) -> Any:
    module = _RESULT_TYPES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

__version__ = "0.1.0"


__all__ = [
    "ApplyError",
    "AsOfError",
    "BatchReport",
    "BronzeError",
    "CdcApplyError",
    "ConfigError",
    "DecodeError",
    "LandError",
    "LandSummary",
    "PathError",
    "SchemaError",
    "SetupError",
    "StateError",
    "StopRequested",
    "StatusEntry",
    "Verification",
    "VerifyError",
    "ForgetError",
    "forget",
    "Forgetting",
    "__version__",
    "apply",
    "as_of_views",
    "configure_logging",
    "exit_code",
    "land",
    "load_config",
    "read_as_of",
    "register_lsn_functions",
    "spark_session",
    "status",
    "verify",
]
