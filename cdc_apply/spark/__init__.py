"""Spark edge: session building and Delta jar set-up. Imports pyspark lazily."""

from __future__ import annotations

from typing import Any


def spark_session(app_name: str = "cdc_apply", **conf: Any):
    """See :func:`cdc_apply.spark.session.spark_session`."""
    from cdc_apply.spark.connect import build_session as _build

    return _build(app_name, **conf)
