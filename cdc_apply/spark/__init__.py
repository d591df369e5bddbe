"""Spark edge: session building and Delta jar set-up. Imports pyspark lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_apply.spark.connect import spark_session

__all__ = ["spark_session"]


def __getattr__(name: str) -> Any:
    # Imported when first named: `python -m cdc_apply.spark.jars` (make setup) must find its module unimported.
    if name == "spark_session":
        from cdc_apply.spark.connect import spark_session

        return spark_session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
