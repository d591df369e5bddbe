"""``cdc-apply land``: land a PostgreSQL replication slot into the bronze table.

SIGINT and SIGTERM stop the lander cleanly: what is buffered is landed and
confirmed, then the command exits 0.
"""

from __future__ import annotations

import signal
import threading

from cdc_apply.config import load_config


def run_land(config_path: str, once: bool = False) -> int:
    """Run the lander of ``config_path``; ``once``: stop when the slot has nothing more to send."""
    from cdc_apply.land.dsn import resolve_dsn
    from cdc_apply.land.lander import Lander
    from cdc_apply.land.options import replication_options
    from cdc_apply.land.server import SourceServer
    from cdc_apply.spark import spark_session

    config = load_config(config_path)
    # Everything that can be wrong with the source is said before Spark starts (that takes a while).
    replication_options(config.source)
    server = SourceServer(resolve_dsn(config.source), config.source, config.source.connect_timeout)
    try:
        server.connect()
        server.preflight()
    finally:
        server.close()
    if server.created:
        print(f"[land {config.source.name}] created {' and '.join(server.created)}", flush=True)
    stop = threading.Event()
    previous = {}

    def on_signal(signum, frame) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        spark = spark_session(f"cdc_apply-land-{config.source.name}")
        Lander(config, spark, stop=stop).run(once=once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
