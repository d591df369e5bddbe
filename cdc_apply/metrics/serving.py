"""Serving a command's metrics: the endpoint started when ``[metrics]`` gives the command a port, with its
line saying where, and stopped with the command."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TextIO

from cdc_apply.config import Config
from cdc_apply.metrics.registry import HEALTH, REGISTRY, SlotCollector
from cdc_apply.metrics.server import MetricsServer, serve_metrics


@contextmanager
def serving(config: Config, command: str, out: TextIO, dsn: str | None = None) -> Iterator[MetricsServer | None]:
    """``/metrics`` and ``/healthz`` of ``command`` (``land`` or ``apply``) while the block runs, when its
    port is configured. ``dsn``: the lander's source, whose slot each scrape asks about. A command that
    ends in an error says so on ``/healthz`` until the process exits."""
    port = config.metrics.land_port if command == "land" else config.metrics.apply_port
    server = serve_metrics(config.metrics.address, port, f"metrics.{command}_port")
    if server is None:
        yield None
        return
    part = f"lander {config.source.name}" if command == "land" else f"apply {config.pipeline}"
    slot = SlotCollector(config.source.name, dsn, config.source.slot) if command == "land" else None
    if slot is not None:
        REGISTRY.register(slot)
    print(f"cdc-apply: {command} serves {server.url}/metrics and {server.url}/healthz", file=out, flush=True)
    try:
        yield server
    except BaseException as exc:
        HEALTH.set_unhealthy(part, f"stopped: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise
    finally:
        if slot is not None:
            REGISTRY.unregister(slot)
        server.close()
