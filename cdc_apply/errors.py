"""One exception tree for the whole project.

Every error has a fixed one-line ``summary`` per class and a ``context`` of
key/value pairs naming where the problem came from (source, seq, LSN, byte
offset, config key, ...). ``str(err)`` renders both, so a log line alone is
enough to find the offending input.
"""

from __future__ import annotations

from typing import Any, Self


class CdcApplyError(Exception):
    """Base class: ``summary`` is fixed per class, ``detail`` and ``context`` vary."""

    summary = "cdc_apply failed"

    def __init__(self, detail: str = "", **context: Any) -> None:
        self.detail = detail
        self.context: dict[str, Any] = {k: v for k, v in context.items() if v is not None}
        super().__init__(self._render())

    def with_context(self, **context: Any) -> Self:
        """Return the same error with more context (callers add source, seq, LSN)."""
        merged = {**context, **self.context}
        clone = type(self).__new__(type(self))
        CdcApplyError.__init__(clone, self.detail, **merged)
        clone.__cause__ = self.__cause__
        return clone

    def _render(self) -> str:
        text = self.summary
        if self.detail:
            text += f": {self.detail}"
        if self.context:
            text += " [" + ", ".join(f"{k}={_show(v)}" for k, v in self.context.items()) + "]"
        return text


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def error_from_text(text: str, cls: type[CdcApplyError] | None = None) -> CdcApplyError:
    """An error rendered by ``str(err)``, as an error of its class again, rendering the same text.

    Errors travel as text out of Spark's Python workers and in the decoded rows' error column; the
    class is the one whose summary starts the text (or ``cls``, when the caller knows it).
    """
    for candidate in [cls] if cls else CdcApplyError.__subclasses__():
        prefix = candidate.summary + ": "
        if text.startswith(prefix):
            return candidate(text[len(prefix):])
    return (cls or CdcApplyError)(text)


class DecodeError(CdcApplyError):
    """A message or value could not be decoded (truncated, garbled, unknown kind)."""

    summary = "cannot decode logical replication message"


class StopRequested(CdcApplyError):
    """A batch refused because the apply job was asked to stop (SIGINT, SIGTERM): not applied, not a failure;
    the next start applies it."""

    summary = "the apply job is stopping"


class SchemaError(CdcApplyError):
    """Schema history is inconsistent with the data (unknown relation, wrong column count)."""

    summary = "schema mismatch"


class ConfigError(CdcApplyError):
    """Configuration is invalid; the context names the key."""

    summary = "invalid configuration"


class SetupError(CdcApplyError):
    """The local runtime is not usable (Java, Delta jars, Maven)."""

    summary = "runtime set-up problem"


class ApplyError(CdcApplyError):
    """A change could not be applied to silver."""

    summary = "cannot apply change"


class BronzeError(CdcApplyError):
    """Bronze rows break the bronze contract ((source, seq) unique, appended in seq order)."""

    summary = "bronze breaks its contract"


class StateError(CdcApplyError):
    """The bookkeeping state and the tables it describes disagree (a state folder lost or restored)."""

    summary = "state does not match the tables"


class LandError(CdcApplyError):
    """The lander could not read the replication slot or write bronze."""

    summary = "cannot land changes"


class PathError(CdcApplyError):
    """A table's path would leave the root it belongs under (silver root, state location)."""

    summary = "table path outside its root"


class AsOfError(CdcApplyError):
    """Silver tables cannot be read as of the LSN asked for (unknown table, history too short, vacuumed)."""

    summary = "cannot read as of that LSN"


class VerifyError(CdcApplyError):
    """``cdc-apply verify`` could not compare a table (no consistent point, silver not caught up, a key it
    cannot range)."""

    summary = "cannot verify"


class ForgetError(CdcApplyError):
    """``cdc-apply forget`` could not remove a key (the source still holds it, a key moved to another key, the
    lander or the apply job did not reach the forget's point)."""

    summary = "cannot forget"
