"""Spark edge: session building and Delta jar set-up. Imports pyspark lazily."""

from __future__ import annotations

from cdc_apply.spark.connect import spark_session

__all__ = ["spark_session"]
