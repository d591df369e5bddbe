"""``cdc-apply land``: land a PostgreSQL replication slot into the bronze table.

SIGINT and SIGTERM stop the lander cleanly: what is buffered is landed and
confirmed, then the command exits 0.
"""

from __future__ import annotations

import signal
import sys
import threading

from cdc_apply.config import Config, load_config
from cdc_apply.errors import ConfigError
from cdc_apply.metrics.serving import serving


def run_land(config_path: str, once: bool = False) -> int:
    """Run the lander of ``config_path``; ``once``: stop when the slot has nothing more to send."""
    from cdc_apply.api import land

    config = load_config(config_path)
    stop = threading.Event()
    previous = {}

    def on_signal(signum, frame) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        with serving(config, "land", sys.stdout, source_dsn(config)):
            land(config, once=once, stop=stop, out=sys.stdout)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def source_dsn(config: Config) -> str | None:
    """The source's connection string; None leaves it to the lander to say what is missing."""
    from cdc_apply.lander.dsn import resolve_dsn

    try:
        return resolve_dsn(config.source)
    except ConfigError:
        return None
