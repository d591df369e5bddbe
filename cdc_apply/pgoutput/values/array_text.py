"""array_out's text form of one-dimensional arrays: '{a,"b c",NULL,"q\\"x"}', '{}', '[0:2]={1,2,3}'.

array_out quotes an element when it is empty, equals NULL in any case, or holds a brace, the
delimiter, '"', '\\' or ASCII whitespace; inside quotes '"' and '\\' are backslash-escaped; a
bare NULL is SQL NULL. A lower bound other than 1 is printed as '[lb:ub]=' before the braces
(the bounds are dropped, the elements kept). Nested braces mean more dimensions: a value of a
column of more dimensions is read by :mod:`.array_nested`; here it is refused, saying its dimensions.

:func:`split_array_texts` finds the elements of every row without backslashes, bounds or
whitespace at once with numpy (quote parity by cumulative sums); :func:`parse_array_text`
reads any single value, including the rest.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from .common import Malformed, offsets_and_data, valid_mask

BOUNDS = re.compile(r"\s*\[(-?\d+):(-?\d+)\]")
SPACE = " \t\n\r\v\f"
_SPACE_BYTES = np.frombuffer(SPACE.encode(), dtype=np.uint8)
# No quoting, escapes, nesting or whitespace: a plain split is enough.
_SIMPLE = re.compile(r'\{([^"\\{}\s]*)\}')
_QUOTE, _BACKSLASH, _OPEN, _CLOSE = 34, 92, 123, 125
# One comma-delimited element and its terminator: quoted (escapes inside) or bare (no escapes).
_TOKEN = re.compile(r'([ \t\n\r\v\f]*(?:(")([^"\\]*(?:\\.[^"\\]*)*)"|([^"\\{},\s](?:[^"\\{},]*[^"\\{},\s])?))'
                    r'[ \t\n\r\v\f]*([,}]))', re.S)
_ESCAPE = re.compile(r"\\(.)", re.S)


def split_array_texts(values: pa.Array, delimiter: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Elements of the rows array_out printed without backslashes, bounds or whitespace.

    Returns (rows done, elements per row, element byte starts, element byte lengths with -1
    for NULL); starts index the values' data buffer, elements are in row order. Other rows
    (not done) need :func:`parse_array_text`.
    """
    n = len(values)
    offsets, data = offsets_and_data(values)
    base = int(offsets[0])
    region = data[base: int(offsets[-1])]
    rel = offsets - base
    lengths = np.diff(rel)
    done = valid_mask(values) & (lengths >= 2)
    if not done.any():
        return done, np.zeros(n, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    row_of = np.repeat(np.arange(n, dtype=np.int32), lengths)
    quote = region == _QUOTE
    seen = None
    if quote.any():
        seen = np.cumsum(quote.view(np.uint8), dtype=np.int32)
        start_parity = (np.concatenate([[0], seen])[rel[:-1]] & 1).astype(bool)
        inside = (seen & 1).astype(bool) ^ start_parity[row_of]
        structural = ~inside & ~quote
    else:
        structural = None

    def outside(mask: np.ndarray) -> np.ndarray:
        return mask if structural is None else mask & structural

    def per_row(mask: np.ndarray) -> np.ndarray:  # masks here are sparse: count their positions
        return np.bincount(row_of[np.flatnonzero(mask)], minlength=n)

    closes = outside(region == _CLOSE)
    first = np.minimum(rel[:-1], len(region) - 1)
    last = np.maximum(rel[1:] - 1, 0)
    done &= (region[first] == _OPEN) & (region[last] == _CLOSE)
    done &= (per_row(outside(region == _OPEN)) == 1) & (per_row(closes) == 1)
    done &= (per_row(region == _BACKSLASH) == 0) & (per_row(outside(np.isin(region, _SPACE_BYTES))) == 0)
    if seen is not None:
        done &= per_row(quote) % 2 == 0
    ends = np.flatnonzero(outside(region == ord(delimiter)) | closes)
    end_row = row_of[ends]
    keep = done[end_row] & (lengths[end_row] > 2)  # '{}' has no element
    ends, end_row = ends[keep], end_row[keep]
    opens_row = np.concatenate([[True], end_row[1:] != end_row[:-1]])
    starts = np.where(opens_row, rel[:-1][end_row] + 1, np.concatenate([[0], ends[:-1]]) + 1)
    span = ends - starts
    if seen is not None:
        quotes_in = seen[ends - 1] - seen[starts - 1]
        quoted = (span >= 2) & (region[starts] == _QUOTE) & (region[ends - 1] == _QUOTE) & (quotes_in == 2)
        bare = (span >= 1) & (quotes_in == 0)
    else:
        quoted, bare = np.zeros(len(ends), dtype=bool), span >= 1
    done[end_row[~(quoted | bare)]] = False
    keep = done[end_row]
    starts, span, quoted, bare, end_row = starts[keep], span[keep], quoted[keep], bare[keep], end_row[keep]
    null = bare & (span == 4)
    if null.any():
        word = region[starts[null][:, None] + np.arange(4)] | 0x20  # ASCII lower case
        null[null] = (word == np.frombuffer(b"null", np.uint8)).all(axis=1)
    element_starts = base + starts + quoted
    element_lengths = np.where(null, -1, span - 2 * quoted)
    return done, np.bincount(end_row, minlength=n), element_starts, element_lengths


def parse_array_text(text: str, delimiter: str = ",") -> list[str | None]:
    """The elements of array_out's text (None for SQL NULL)."""
    match = _SIMPLE.fullmatch(text)
    if match is not None:
        inner = match[1]
        if not inner:
            return []
        elements = inner.split(delimiter)
        if "" not in elements:
            return [None if len(e) == 4 and e.upper() == "NULL" else e for e in elements]
    if delimiter == "," and len(text) > 2 and text[0] == "{":
        elements = _parse_tokens(text)
        if elements is not None:
            return elements
    return _parse_careful(text, delimiter)


def _parse_tokens(text: str) -> list[str | None] | None:
    """Quoted and bare elements by one regex pass; None when the careful parser must decide."""
    tokens = _TOKEN.findall(text, 1)
    if not tokens or sum(len(t[0]) for t in tokens) != len(text) - 1 or tokens[-1][4] != "}" \
            or any(t[4] == "}" for t in tokens[:-1]):
        return None
    return [(_ESCAPE.sub(r"\1", quoted) if "\\" in quoted else quoted) if mark
            else (None if len(bare) == 4 and bare.upper() == "NULL" else bare)
            for _, mark, quoted, bare, _ in tokens]


def _parse_careful(text: str, delimiter: str) -> list[str | None]:
    pos, expected = 0, None
    bounds = BOUNDS.match(text)
    if bounds is not None:
        if BOUNDS.match(text, bounds.end()) is not None:
            raise Malformed(_more_dimensions(text, delimiter))
        pos = bounds.end()
        if text[pos: pos + 1] != "=":
            raise Malformed("expected '=' after the array bounds")
        pos += 1
        expected = int(bounds[2]) - int(bounds[1]) + 1
    n = len(text)
    while pos < n and text[pos] in SPACE:
        pos += 1
    if pos >= n or text[pos] != "{":
        raise Malformed("an array starts with '{'")
    pos += 1
    elements: list[str | None] = []
    while True:
        while pos < n and text[pos] in SPACE:
            pos += 1
        if pos >= n:
            raise Malformed("unterminated array")
        if text[pos] == "}" and not elements:
            pos += 1
            break
        if text[pos] == "{":
            raise Malformed(_more_dimensions(text, delimiter))
        element, pos = read_element(text, pos, delimiter)
        elements.append(element)
        pos, closed = after_element(text, pos, delimiter)
        if closed:
            break
    if text[pos:].strip(SPACE):
        raise Malformed("junk after the array")
    if expected is not None and expected != len(elements):
        raise Malformed(f"bounds say {expected} elements, found {len(elements)}")
    return elements


def _more_dimensions(text: str, delimiter: str) -> str:
    """Why a value of several dimensions does not fit a one-dimensional column (or why it is malformed)."""
    from .array_nested import dimension_mismatch, parse_nested_text

    shape, _ = parse_nested_text(text, delimiter)   # a malformed value raises its own reason
    return dimension_mismatch(len(shape), 1)


def after_element(text: str, pos: int, delimiter: str) -> tuple[int, bool]:
    """Past the delimiter or the ``}`` that must follow an element (blanks allowed before it): the position
    after it, and whether it closed the array (or sub-array)."""
    n = len(text)
    while pos < n and text[pos] in SPACE:
        pos += 1
    if pos < n and text[pos] == delimiter:
        return pos + 1, False
    if pos < n and text[pos] == "}":
        return pos + 1, True
    raise Malformed("expected a delimiter or '}' after an element")


def read_element(text: str, pos: int, delimiter: str) -> tuple[str | None, int]:
    """One element starting at ``pos``: quoted or bare, backslash escapes honoured."""
    n = len(text)
    out: list[str] = []
    if text[pos] == '"':
        pos += 1
        while True:
            if pos >= n:
                raise Malformed("unterminated quoted element")
            char = text[pos]
            if char == "\\":
                if pos + 1 >= n:
                    raise Malformed("unterminated escape")
                out.append(text[pos + 1])
                pos += 2
            elif char == '"':
                return "".join(out), pos + 1
            else:
                out.append(char)
                pos += 1
    kept = 0  # length up to the last escaped character: escaped spaces are not trimmed
    while pos < n and text[pos] != delimiter and text[pos] != "}":
        char = text[pos]
        if char in '"{':
            raise Malformed(f"unexpected {char!r} in an unquoted element")
        if char == "\\":
            if pos + 1 >= n:
                raise Malformed("unterminated escape")
            out.append(text[pos + 1])
            pos += 2
            kept = len(out)
        else:
            out.append(char)
            pos += 1
    raw = "".join(out)
    value = raw[:kept] + raw[kept:].rstrip(SPACE)
    if not value:
        raise Malformed("empty unquoted element")
    if kept == 0 and value.upper() == "NULL":
        return None, pos
    return value, pos


