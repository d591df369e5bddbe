"""Metrics for monitoring (docs/OPERATIONS.md): the lander's and the apply job's figures in one Prometheus
registry (:mod:`~cdc_apply.metrics.registry`, fed by one call per event from the lander and the batch), the
HTTP endpoint serving ``/metrics`` and ``/healthz`` (:mod:`~cdc_apply.metrics.server`), the replication
slot as the source sees it (:mod:`~cdc_apply.metrics.source_side`, for the endpoint and ``cdc-apply
status``) and ``status --prometheus``'s text for node_exporter's textfile collector
(:mod:`~cdc_apply.metrics.textfile`). Imports no Spark."""
