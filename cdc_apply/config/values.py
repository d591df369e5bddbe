"""How one configuration key's value is checked: its kind (from the field's annotation), its words, its range.

Every refusal is a :class:`~cdc_apply.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, Mapping, get_args

from cdc_apply.config.choices import ENUMS, Numeric, Origin, choose
from cdc_apply.errors import ConfigError

# Words of the string keys that are not enums (those are cdc_apply.config.choices, by annotation), by the
# Literal their field is annotated with: apply.origin and source.origin (Origin), apply.numeric (Numeric).
_WORDS: dict[str, tuple[str, ...]] = {"Origin": get_args(Origin), "Numeric": get_args(Numeric)}


# Numbers that must be above 0: a zero (or less) would stop the work they size or pace (a lander landing
# nothing per commit, a timeout that never waits); the rest must not be negative. Floats must be finite.
_POSITIVE = frozenset({
    "bronze.max_files_per_trigger", "source.snapshot_batch_bytes", "source.snapshot_check_seconds",
    "source.connect_timeout", "land.batch_messages", "land.batch_bytes", "land.batch_seconds",
    "land.keepalive_seconds", "land.backoff_seconds", "land.backoff_max_seconds",
})


def _coerce(key: str, value: Any, annotation: str) -> Any:
    """Check ``value`` against a dataclass field's annotation text (and :data:`_POSITIVE`)."""
    value = _coerce_kind(key, value, annotation)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key in _POSITIVE and not value > 0:
            raise ConfigError(f"must be more than 0, got {value}", key=key)
    if isinstance(value, str) and "\x00" in value or isinstance(value, tuple) and any(
            "\x00" in (v if isinstance(v, str) else "".join(map(str, v))) for v in value):
        raise ConfigError("must not contain a NUL character", key=key)
    return value


def _coerce_kind(key: str, value: Any, annotation: str) -> Any:
    if annotation in ENUMS:
        return choose(ENUMS[annotation], value, key)
    kinds = [a.strip() for a in annotation.split("|")]
    if value is None and "None" in kinds:
        return None
    if "tuple[tuple[str, str], ...]" in kinds:   # a TOML table of strings: {email = "sha256"}
        if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return tuple(value.items())
        raise ConfigError("expected a table of column = \"word\" (e.g. { email = \"sha256\" })", key=key)
    if "tuple[tuple[str, int], ...]" in kinds:   # a TOML table of counts: {grid = 2}
        if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                              for k, v in value.items()):
            return tuple(value.items())
        raise ConfigError("expected a table of column = integer (e.g. { grid = 2 })", key=key)
    enum = next((ENUMS[k] for k in kinds if k in ENUMS), None)
    if enum is not None:   # an optional word: `Deletes | None`
        return choose(enum, value, key)
    if "tuple[str, ...]" in kinds:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError("expected a list of strings (or one comma-separated string)", key=key)
    if "bool" in kinds:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"expected true or false, got {value!r}", key=key)
    if "int" in kinds:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"must not be negative, got {value}", key=key)
            return value
        raise ConfigError(f"expected an integer, got {value!r}", key=key)
    if "float" in kinds:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"expected a finite number of 0 or more, got {value!r}", key=key)
            return float(value)
        raise ConfigError(f"expected a number, got {value!r}", key=key)
    words = next((_WORDS[k] for k in kinds if k in _WORDS), None)
    if "str" in kinds or words is not None:
        if isinstance(value, str):
            if words is not None and value not in words:
                raise ConfigError(f"must be one of {', '.join(words)}; got {value!r}", key=key)
            return value
        raise ConfigError(f"expected a string, got {value!r}", key=key)
    raise ConfigError(f"unsupported value {value!r}", key=key)


def read_section(cls, raw: Any, prefix: str):
    """An instance of the section dataclass ``cls`` from the TOML table ``raw`` (``[prefix]``), each key checked."""
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise ConfigError("expected a table", key=prefix)
    known = {f.name: f for f in fields(cls)}
    values = {}
    for name, value in raw.items():
        if name not in known:
            raise ConfigError(f"unknown key (known: {', '.join(sorted(known))})", key=f"{prefix}.{name}")
        values[name] = _coerce(f"{prefix}.{name}", value, str(known[name].type))
    return cls(**values)
