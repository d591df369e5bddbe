"""Logging: one logger per layer, and the progress lines as log records.

Loggers (all children of ``cdc_apply``; the library adds no handler of its own, so nothing is shown
until the application configures logging — :func:`configure_logging` does, and the ``cdc-apply``
command calls it):

=====================  ==============================================================================
``cdc_apply.apply``    the apply job: its start, one record per batch (the batch line), live progress
                       while a batch runs, the end of a run
``cdc_apply.land``     the lander: its start, one record per landed batch, reconnects, the summary
``cdc_apply.status``   what ``status`` read
``cdc_apply.spark``    which session was used or built, from which configuration, and where Delta came from
``cdc_apply.cli``      the command's own messages (errors)
=====================  ==============================================================================

The apply pipeline and the lander write their progress lines to a text stream (``out``);
:class:`LineLog` is such a stream that turns every line into a log record, and can also copy it to
another stream (the command keeps its lines on stdout, as they always were).
"""

from __future__ import annotations

import io
import logging
import sys
from typing import Protocol, TextIO

# A record whose line was also written to a stream (the command's stdout) carries this attribute, so
# a console handler can leave it out instead of showing the line twice.
PRINTED = "cdc_apply_printed"

_HANDLER_MARK = "_cdc_apply_handler"
DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record arrives (pytest and notebooks replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # the base class assigns it once; the current stderr is used anyway
        pass


class _NotPrinted(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, PRINTED, False)


def configure_logging(level: int | str = "INFO", stream: TextIO | None = None, fmt: str = DEFAULT_FORMAT,
                      skip_printed: bool = False, propagate: bool = False) -> logging.Handler:
    """Show ``cdc_apply``'s log records at ``level`` and above on ``stream`` (default: the current stderr).

    For notebooks and scripts: ``cdc_apply.configure_logging()`` shows the batch lines and the live
    progress of a long batch. Calling it again replaces the handler it added before (never a second
    copy of every line); handlers added by anything else are left alone. Records stop at the
    ``cdc_apply`` logger unless ``propagate`` (a root handler would print them a second time).
    ``skip_printed``: leave out lines already written to a stream by :class:`LineLog` (the command's
    stdout). Returns the handler.
    """
    logger = logging.getLogger("cdc_apply")
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    handler: logging.Handler = logging.StreamHandler(stream) if stream is not None else _CurrentStderr()
    handler.setFormatter(logging.Formatter(fmt))
    if skip_printed:
        handler.addFilter(_NotPrinted())
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)
    logger.setLevel(level.upper() if isinstance(level, str) else level)
    logger.propagate = propagate
    return handler


class TextOut(Protocol):
    """Where progress lines are printed: ``sys.stdout``, a :class:`LineLog`, an ``io.StringIO`` ..."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


class LineLog(io.TextIOBase):
    """A text stream that logs each line written to it (at INFO on ``logger``) and optionally copies it.

    ``copy``: another stream that receives the text as written (the command passes stdout); the
    records then carry :data:`PRINTED`. A line is logged when its newline arrives; :meth:`flush`
    logs a pending partial line.
    """

    def __init__(self, logger: logging.Logger | str, copy: TextIO | None = None, level: int = logging.INFO) -> None:
        super().__init__()
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.copy = copy
        self.level = level
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.copy is not None:
            self.copy.write(text)
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""
        if self.copy is not None:
            self.copy.flush()

    def _emit(self, line: str) -> None:
        if line.strip():
            extra = {PRINTED: True} if self.copy is not None else None
            # stacklevel 3: the record names whoever wrote the line (print is not a Python frame).
            self.logger.log(self.level, line, extra=extra, stacklevel=3)
