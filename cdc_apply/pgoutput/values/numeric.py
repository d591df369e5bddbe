"""numeric: text (numeric_out) and binary (numeric_send) -> decimal128(p,s) or canonical text.

numeric_out prints plain decimal text ('-12.50', never an exponent) or 'NaN', 'Infinity',
'-Infinity'. numeric_send is int16 ndigits, int16 weight (base-10000 exponent of the first
digit), uint16 sign (0x0000 +, 0x4000 -, 0xC000 NaN, 0xD000 +Inf, 0xF000 -Inf), uint16
dscale (digits printed after the point), then ndigits base-10000 digits. Binary values are
turned into numeric_out's exact text a column at a time with numpy (the text is the canonical
string form and, for wide decimals, what Arrow's cast reads); decimals up to 18 digits are
computed directly as int64.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..types import ColumnType
from .common import (
    Malformed,
    cast_or_fail,
    check_regex,
    decimal_from_int64,
    fail,
    first_bad_row,
    offsets_and_data,
    per_value,
    utf8,
    valid_mask,
    validity_of,
)

NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN, NUMERIC_PINF, NUMERIC_NINF = 0x0000, 0x4000, 0xC000, 0xD000, 0xF000
SPECIAL_TEXT = {NUMERIC_NAN: "NaN", NUMERIC_PINF: "Infinity", NUMERIC_NINF: "-Infinity"}
_HEADER = struct.Struct(">hhHH")
_TEXT_SHAPE = r"^(-?[0-9]+(\.[0-9]+)?|NaN|-?Infinity)$"
_NAN_ADVICE = ("{what} cannot be stored in {pg_name} mapped to DECIMAL; set the numeric type "
               "option to \"string\" to keep every numeric value losslessly as text")
_WIDE = Context(prec=200_000)  # exact for every numeric PostgreSQL can hold
_MAX_TEXT_BYTES = 1 << 26  # beyond this a batch of (valid but huge) numerics is printed value by value


def _advice(ct: ColumnType, word: int) -> str:
    return _NAN_ADVICE.format(what=SPECIAL_TEXT[word], pg_name=ct.pg_name)


# -- text ----------------------------------------------------------------------------------------
def numeric_decimal_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_out into decimal128(p,s): Arrow's cast; 'NaN' cannot be stored."""
    strings = utf8(ct, values)
    try:
        return pc.cast(strings, ct.arrow_type)
    except pa.ArrowInvalid:
        pass
    special = pc.is_in(strings, pa.array(["NaN", "Infinity", "-Infinity"]))
    row = first_bad_row(values, pc.invert(special))
    if row is not None:
        raise fail(ct, values, row, _NAN_ADVICE.format(what=strings[row].as_py(), pg_name=ct.pg_name))
    return cast_or_fail(ct, values, strings, ct.arrow_type)


def numeric_string_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_out kept as text (shape checked)."""
    strings = utf8(ct, values)
    check_regex(ct, values, strings, _TEXT_SHAPE, "a numeric")
    return strings


# -- binary, one value (the careful reference) ------------------------------------------------------
def numeric_parts(raw: bytes) -> tuple[int, int, int, tuple[int, ...]]:
    """numeric_send: (sign, weight, dscale, base-10000 digits), checked as numeric_recv does."""
    if len(raw) < 8:
        raise Malformed(f"numeric needs an 8-byte header, got {len(raw)} bytes")
    ndigits, weight, sign, dscale = _HEADER.unpack_from(raw)
    if ndigits < 0 or len(raw) != 8 + 2 * ndigits:
        raise Malformed(f"{ndigits} digits do not fit {len(raw)} bytes")
    if sign not in (NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN, NUMERIC_PINF, NUMERIC_NINF):
        raise Malformed(f"invalid sign word 0x{sign:04x}")
    if dscale > 0x3FFF:
        raise Malformed(f"invalid display scale {dscale}")
    digits = struct.unpack_from(f">{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise Malformed("a base-10000 digit is over 9999")
    return sign, weight, dscale, digits


def numeric_text_from_binary(raw: bytes) -> str:
    """numeric_send -> the text numeric_out prints (digits past the display scale are cut, not rounded)."""
    sign, weight, dscale, digits = numeric_parts(raw)
    if sign in SPECIAL_TEXT:
        return SPECIAL_TEXT[sign]
    magnitude = int("".join(f"{d:04d}" for d in digits)) if digits else 0
    exponent = 4 * (weight - len(digits) + 1) + dscale
    scaled = magnitude * 10**exponent if exponent >= 0 else magnitude // 10**-exponent
    text = str(scaled)
    if dscale:
        text = text.rjust(dscale + 1, "0")
        text = f"{text[:-dscale]}.{text[-dscale:]}"
    return "-" + text if sign == NUMERIC_NEG else text


# -- binary, a column at a time -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Column:
    """The headers and digits of every present value of a numeric_send column."""

    present: np.ndarray  # row numbers
    weight: np.ndarray
    sign: np.ndarray
    dscale: np.ndarray
    ndigits: np.ndarray
    first: np.ndarray  # index of each value's first digit in ``digits`` (len(present) + 1)
    digits: np.ndarray  # every value's base-10000 digits, in row order


def _read(ct: ColumnType, values: pa.Array) -> _Column:
    offsets, data = offsets_and_data(values)
    lengths = np.diff(offsets)
    present = np.flatnonzero(valid_mask(values))
    short = present[lengths[present] < 8]
    if short.size:
        raise fail(ct, values, int(short[0]), f"numeric needs an 8-byte header, got {lengths[short[0]]} bytes")
    starts = offsets[present]
    header = data[starts[:, None] + np.arange(8)].view(">i2").astype(np.int64)
    ndigits, weight = header[:, 0], header[:, 1]
    sign, dscale = header[:, 2] & 0xFFFF, header[:, 3] & 0xFFFF
    known = np.isin(sign, [NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN, NUMERIC_PINF, NUMERIC_NINF])
    bad = np.flatnonzero((ndigits < 0) | (lengths[present] != 8 + 2 * ndigits) | ~known | (dscale > 0x3FFF))
    if bad.size:
        raw = values[int(present[bad[0]])].as_py()
        try:
            numeric_parts(raw)
        except Malformed as exc:
            raise fail(ct, values, int(present[bad[0]]), str(exc)) from None
    first = np.zeros(len(present) + 1, dtype=np.int64)
    np.cumsum(ndigits, out=first[1:])
    owner = np.repeat(np.arange(len(present)), ndigits)
    at = starts[owner] + 8 + 2 * (np.arange(int(first[-1]), dtype=np.int64) - first[owner])
    digits = data[at].astype(np.int64) * 256 + data[at + 1]
    bad = np.flatnonzero(digits > 9999)
    if bad.size:
        raise fail(ct, values, int(present[owner[bad[0]]]), "a base-10000 digit is over 9999")
    return _Column(present, weight, sign, dscale, ndigits, first, digits)


def _digit(column: _Column, value: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Digit ``index`` of each ``value`` (0 outside its digits, as numeric_out pads)."""
    inside = (index >= 0) & (index < column.ndigits[value])
    padded = np.append(column.digits, 0)  # the last slot answers for digits outside a value
    return padded[np.where(inside, column.first[value] + index, len(column.digits))]


def _groups(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, position within owner) of ``counts[i]`` consecutive items per owner."""
    owner = np.repeat(np.arange(len(counts)), counts)
    base = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=base[1:])
    return owner, np.arange(int(base[-1]), dtype=np.int64) - base[owner]


_COLUMNS = np.arange(4)
# every base-10000 digit as its four characters, and which of them a leading digit prints
_DIGIT_CHARS = np.frombuffer("".join(f"{d:04d}" for d in range(10000)).encode(), dtype=np.uint8).reshape(-1, 4)
_LEADING_KEEP = _COLUMNS >= 4 - (1 + (np.arange(10000)[:, None] >= np.array([10, 100, 1000])).sum(axis=1))[:, None]


def _texts(ct: ColumnType, values: pa.Array, column: _Column) -> pa.Array:
    """numeric_out's text of every value, built in four-character cells: [sign][integer
    digits...][point][fraction digits...], one base-10000 digit per digit cell, then the
    characters numeric_out would not print (sign of a positive value, leading zeros, the point
    of a whole number, digits past the display scale) dropped."""
    finite = (column.sign == NUMERIC_POS) | (column.sign == NUMERIC_NEG)
    int_groups = np.where(finite, np.maximum(column.weight + 1, 1), 1)
    frac_groups = np.where(finite, (column.dscale + 3) // 4, 0)
    cells = 2 + int_groups + frac_groups
    if 4 * int(cells.sum()) > _MAX_TEXT_BYTES:
        return per_value(ct, values, numeric_text_from_binary, lambda items: pa.array(items, pa.string()))
    base = np.zeros(len(cells) + 1, dtype=np.int64)
    np.cumsum(cells, out=base[1:])
    chars = np.zeros((int(base[-1]), 4), dtype=np.uint8)
    keep = np.zeros((int(base[-1]), 4), dtype=bool)
    chars[base[:-1], 0] = ord("-")
    keep[base[:-1], 0] = column.sign == NUMERIC_NEG
    value, group = _groups(int_groups)
    digit = np.where(column.weight[value] >= 0, _digit(column, value, group), 0)
    rows = base[value] + 1 + group
    chars[rows] = _DIGIT_CHARS[digit]
    keep[rows] = True
    leading = group == 0  # the first integer cell prints without leading zeros (but one digit)
    keep[rows[leading]] = _LEADING_KEEP[digit[leading]]
    dot = base[:-1] + 1 + int_groups
    chars[dot, 0] = ord(".")
    keep[dot, 0] = frac_groups > 0
    value, group = _groups(frac_groups)
    digit = _digit(column, value, column.weight[value] + 1 + group)
    rows = dot[value] + 1 + group
    chars[rows] = _DIGIT_CHARS[digit]
    keep[rows] = (4 * group[:, None] + _COLUMNS) < column.dscale[value][:, None]
    per_cell = keep.sum(axis=1)
    running = np.zeros(len(per_cell) + 1, dtype=np.int64)
    np.cumsum(per_cell, out=running[1:])
    lengths = np.zeros(len(values), dtype=np.int64)
    lengths[column.present] = running[base[1:]] - running[base[:-1]]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    texts = pa.Array.from_buffers(pa.string(), len(values), [validity_of(values), pa.py_buffer(
        offsets.astype(np.int32)), pa.py_buffer(chars[keep])], null_count=values.null_count)
    if finite.all():
        return texts
    mask = np.zeros(len(values), dtype=bool)
    mask[column.present[~finite]] = True
    specials = pa.array([SPECIAL_TEXT[int(word)] for word in column.sign[~finite]], pa.string())
    return pc.replace_with_mask(texts, pa.array(mask), specials)


def numeric_string_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_send kept as numeric_out's canonical text."""
    return _texts(ct, values, _read(ct, values))


def numeric_decimal_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_send into decimal128(p,s): int64 arithmetic when p <= 18, else via the exact text."""
    column = _read(ct, values)
    special = np.flatnonzero((column.sign != NUMERIC_POS) & (column.sign != NUMERIC_NEG))
    if special.size:
        raise fail(ct, values, int(column.present[special[0]]), _advice(ct, int(column.sign[special[0]])))
    if ct.precision > 18:
        return cast_or_fail(ct, values, _texts(ct, values, column), ct.arrow_type)
    owner, position = _groups(column.ndigits)
    digit = column.digits
    exponent = 4 * (column.weight[owner] - position) + ct.scale
    # A digit alone must fit: below 10**precision, and whole at the column's scale.
    room = np.clip(ct.precision - exponent, 0, 18)
    low = np.clip(-exponent, 0, 5)
    ok = np.where(exponent >= 0, digit < 10**room, digit % 10**low == 0)
    if not ok.all():
        row = int(column.present[owner[np.flatnonzero(~ok)[0]]])
        raise fail(ct, values, row, f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    contribution = np.where(exponent >= 0, digit * 10 ** np.clip(exponent, 0, 18), digit // 10**low)
    running = np.zeros(len(digit) + 1, dtype=np.int64)
    np.cumsum(contribution, out=running[1:])  # wraps on overflow; differences stay exact
    magnitude = running[column.first[1:]] - running[column.first[:-1]]
    too_big = np.flatnonzero(magnitude >= 10**ct.precision)
    if too_big.size:
        raise fail(ct, values, int(column.present[too_big[0]]),
                   f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    unscaled = np.zeros(len(values), dtype=np.int64)
    unscaled[column.present] = np.where(column.sign == NUMERIC_NEG, -magnitude, magnitude)
    return decimal_from_int64(ct.arrow_type, unscaled, values)


def _decimal_from_binary(ct: ColumnType, raw: bytes) -> Decimal:
    sign, weight, _, digits = numeric_parts(raw)
    if sign in SPECIAL_TEXT:
        raise Malformed(_advice(ct, sign))
    magnitude = int("".join(f"{d:04d}" for d in digits)) if digits else 0
    exponent = 4 * (weight - len(digits) + 1) + ct.scale
    if exponent < 0:
        magnitude, cut = divmod(magnitude, 10**-exponent)
    else:
        magnitude, cut = magnitude * 10**exponent, 0
    if cut or magnitude >= 10**ct.precision:
        raise Malformed(f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    return _WIDE.scaleb(Decimal(-magnitude if sign == NUMERIC_NEG else magnitude), -ct.scale)


def _decimal_from_text(ct: ColumnType, raw: bytes) -> Decimal:
    text = raw.decode("ascii")
    if text in ("NaN", "Infinity", "-Infinity"):
        raise Malformed(_NAN_ADVICE.format(what=text, pg_name=ct.pg_name))
    if not _TEXT_SCALAR.fullmatch(text):
        raise Malformed("not a numeric")
    value = Decimal(text)
    scaled = _WIDE.scaleb(value, ct.scale)
    if scaled != _WIDE.to_integral_value(scaled) or _WIDE.abs(scaled) >= 10**ct.precision:
        raise Malformed(f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    return value


def _string_from_text(ct: ColumnType, raw: bytes) -> str:
    text = raw.decode("ascii")
    if not _TEXT_SCALAR.fullmatch(text):
        raise Malformed("not a numeric")
    return text


_TEXT_SCALAR = re.compile(_TEXT_SHAPE)


TEXT = {"numeric": numeric_decimal_text, "numeric_text": numeric_string_text}
BINARY = {"numeric": numeric_decimal_binary, "numeric_text": numeric_string_binary}
SCALAR_TEXT = {"numeric": (_decimal_from_text, 16), "numeric_text": (_string_from_text, 128)}
SCALAR_BINARY = {"numeric": (_decimal_from_binary, 96),
                 "numeric_text": (lambda ct, raw: numeric_text_from_binary(raw), 96)}
