"""The HTTP endpoint of a long-running command: ``/metrics`` (prometheus_client's WSGI app over
:data:`~cdc_apply.metrics.registry.REGISTRY`) and ``/healthz`` (200 ``ok`` while healthy, 503 and the
reasons otherwise), served by a daemon thread so the command stops as it always has."""

from __future__ import annotations

import threading
from socketserver import ThreadingMixIn
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from cdc_apply.errors import ConfigError
from cdc_apply.metrics.registry import HEALTH, REGISTRY, Health


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True   # a scrape under way never holds the process open


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:   # a scrape every few seconds is no news
        pass


def health_app(metrics_app: Callable, health: Health) -> Callable:
    """A WSGI app answering ``/healthz`` from ``health`` and everything else from ``metrics_app``."""

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").rstrip("/") == "/healthz":
            reasons = health.reasons()
            body = ("\n".join(reasons) if reasons else "ok").encode() + b"\n"
            start_response("503 Service Unavailable" if reasons else "200 OK",
                           [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
            return [body]
        return metrics_app(environ, start_response)

    return app


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``address:port`` (port 0: any free one; :attr:`port` says which)."""

    def __init__(self, address: str, port: int, key: str = "metrics") -> None:
        app = health_app(make_wsgi_app(REGISTRY), HEALTH)
        try:
            self._httpd = make_server(address, port, app, _Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}", key=key) from None
        self.address = address
        self.port = int(self._httpd.server_port)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="cdc_apply-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(address: str, port: int | None, key: str) -> MetricsServer | None:
    """A :class:`MetricsServer` when ``port`` is configured (``key`` names it in an error), else None."""
    return None if port is None else MetricsServer(address, port, key)
