"""cdc_apply: PostgreSQL logical replication (pgoutput) to Delta Lake on Spark.

``cdc_apply.pgoutput`` and the planning core import no Spark; importing this
package does not start or import Spark either.
"""

from __future__ import annotations

from typing import Any

from cdc_apply.errors import (
    ApplyError,
    CdcApplyError,
    ConfigError,
    DecodeError,
    LandError,
    SchemaError,
    SetupError,
)

from cdc_apply.delta.as_of import AsOf, as_of_views, read_as_of  # noqa: E402,F401 - docs/HISTORY.md

__version__ = "0.1.0"


def spark_session(app_name: str = "cdc_apply", **conf: Any):
    """Return a Spark session with Delta Lake (see :func:`cdc_apply.spark.session.spark_session`)."""
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
    "spark_session",
]
