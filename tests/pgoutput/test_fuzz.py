"""Fuzz: mutated and truncated real messages decode or fail with DecodeError, never anything else, never hang.

The corpus is every message of the golden captures (PostgreSQL 18, protocol 1-4). Mutations:
truncation at every position of a sample, Int16 counts and Int32 length fields set to huge,
negative and off-by-one values, byte flips, random bytes inserted and deleted, and a wrong
stream flag. Both the reference decoder (``decode_message``, message by message) and the
batched walk (``walk_dml``, thousands of messages per call) must only succeed or report a
:class:`DecodeError`; the batched walk must also report the same errors as the reference decoder, row by row (and the
same values as the reference walk, checked on one batch in four).

Deterministic: a seeded ``random.Random`` (``CDC_FUZZ_SEED`` overrides the seed, printed with ``-s``).
"""

from __future__ import annotations

import faulthandler
import os
import random
import struct
import sys
import time

import numpy as np
import pyarrow as pa
from golden.loader import list_configs, list_scenarios, load_capture
from test_columnar import assert_same

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput import UNCHANGED_TOAST, Delete, Insert, Update, decode_message
from cdc_apply.pgoutput.columnar import walk_dml, walk_dml_reference

SEED = int(os.environ.get("CDC_FUZZ_SEED", "1729"))
TARGET = 110_000          # mutated messages
BATCH = 4096              # messages per walk_dml call
HANG_LIMIT_S = 300        # the whole test; a hang dumps every thread's stack and exits


def real_messages() -> list[tuple[bytes, bool]]:
    """Every distinct (payload, in_stream) of the golden captures, in capture order."""
    seen: dict[tuple[bytes, bool], None] = {}
    for scenario in list_scenarios():
        for config in list_configs(scenario):
            in_stream = False
            for message in load_capture(scenario, config):
                if message.kind == "S":
                    seen.setdefault((message.payload, False), None)
                    in_stream = True
                    continue
                if message.kind == "E":
                    in_stream = False
                seen.setdefault((message.payload, in_stream), None)
    return list(seen)


def dml_fields(payload: bytes, in_stream: bool) -> list[tuple[int, int]]:
    """(offset, width) of the count and length fields of a valid Insert/Update/Delete."""
    fields = []
    pos = 1 + (4 if in_stream else 0) + 4
    while pos < len(payload):
        marker = payload[pos]
        pos += 1
        if marker not in b"KON":
            break
        fields.append((pos, 2))
        (count,) = struct.unpack_from(">h", payload, pos)
        pos += 2
        for _ in range(count):
            kind = payload[pos]
            pos += 1
            if kind in b"tb":
                fields.append((pos, 4))
                (size,) = struct.unpack_from(">i", payload, pos)
                pos += 4 + size
    return fields


HUGE32 = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x40000000, 0x00010000)
HUGE16 = (0x7FFF, 0x8000, 0xFFFF, 0x0100)


def mutate_length(rng: random.Random, payload: bytes, in_stream: bool) -> bytes | None:
    fields = dml_fields(payload, in_stream)
    if not fields:
        return None
    at, width = rng.choice(fields)
    current = int.from_bytes(payload[at:at + width], "big")
    choices = (HUGE32 if width == 4 else HUGE16) + (current + 1, max(current - 1, 0), current + 1000)
    value = rng.choice(choices) % (1 << (8 * width))
    return payload[:at] + value.to_bytes(width, "big") + payload[at + width:]


def mutate_bytes(rng: random.Random, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        how = rng.randrange(4)
        at = rng.randrange(len(data) + 1)
        if how == 0 and at < len(data):
            data[at] ^= 1 << rng.randrange(8)                       # bit flip
        elif how == 1 and at < len(data):
            data[at] = rng.randrange(256)                           # byte replaced
        elif how == 2:
            data[at:at] = rng.randbytes(rng.randint(1, 8))          # bytes inserted
        else:
            del data[at:at + rng.randint(1, 8)]                     # bytes deleted
    return bytes(data)


def mutated_corpus(rng: random.Random) -> list[tuple[bytes, bool]]:
    corpus = real_messages()
    dml = [(p, s) for p, s in corpus if p[:1] in (b"I", b"U", b"D")]
    out: list[tuple[bytes, bool]] = []
    # truncation at every position of a sample (DML and every other kind)
    for payload, flag in rng.sample(dml, 120) + rng.sample(corpus, 60):
        out += [(payload[:cut], flag) for cut in range(len(payload))]
    # length and count fields set to huge, negative and off-by-one values
    while len(out) < 40_000:
        payload, flag = rng.choice(dml)
        changed = mutate_length(rng, payload, flag)
        if changed is not None:
            out.append((changed, flag))
    # byte flips, inserted and deleted bytes, sometimes the wrong stream flag
    while len(out) < TARGET:
        payload, flag = rng.choice(dml if rng.random() < 0.85 else corpus)
        if rng.random() < 0.05:
            flag = not flag
        out.append((mutate_bytes(rng, payload), flag))
    rng.shuffle(out)
    return out


def _walk_outcome(message) -> str | None:
    """The error walk_dml reports for a message decode_message accepted (None for good DML)."""
    if not isinstance(message, (Insert, Update, Delete)):
        return str(DecodeError("expected Insert, Update or Delete", message_type=type(message).__name__))
    old = getattr(message, "key", None) or getattr(message, "old", None)
    if old is not None and any(v is UNCHANGED_TOAST for v in old):
        return str(DecodeError("unchanged TOAST value in a key/old tuple", message_type=type(message).__name__))
    return None


def test_fuzz_mutated_real_messages_only_ever_raise_decode_error(capsys):
    faulthandler.dump_traceback_later(HANG_LIMIT_S, exit=True, file=sys.__stderr__)
    try:
        rng = random.Random(SEED)
        with capsys.disabled():
            print(f"\nfuzz seed {SEED} (set CDC_FUZZ_SEED to change)")
        cases = mutated_corpus(rng)
        assert len(cases) >= 100_000

        started = time.monotonic()
        failed = 0
        expected: list[str | None] = []  # what walk_dml must report per case: the error text, or None
        for payload, flag in cases:
            try:
                message = decode_message(payload, flag)
                expected.append(_walk_outcome(message))
            except DecodeError as err:
                failed += 1
                expected.append(str(err))
            except Exception as exc:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"seed {SEED}: decode_message({payload.hex()}, {flag}) raised "
                                     f"{type(exc).__name__}: {exc}") from exc
        reference_s = time.monotonic() - started
        assert 0 < failed < len(cases)

        started = time.monotonic()
        walk_errors = 0
        for i in range(0, len(cases), BATCH):
            chunk = cases[i:i + BATCH]
            payloads = pa.array([p for p, _ in chunk], pa.binary())
            flags = np.array([f for _, f in chunk], dtype=bool)
            one = time.monotonic()
            try:
                walked = walk_dml(payloads, flags)
            except Exception as exc:  # noqa: BLE001
                raise AssertionError(f"seed {SEED}: walk_dml raised {type(exc).__name__}: {exc} "
                                     f"on batch starting at case {i}") from exc
            assert time.monotonic() - one < 60, f"seed {SEED}: batch at case {i} took too long"
            assert all(e is None or isinstance(e, DecodeError) for e in walked.error)
            got = [None if e is None else str(e) for e in walked.error]
            assert got == expected[i:i + BATCH], f"seed {SEED}: batch at case {i} differs from decode_message"
            walk_errors += sum(e is not None for e in walked.error)
            if (i // BATCH) % 4 == 0:  # values too, against the reference walk
                assert_same(walked, walk_dml_reference(payloads, flags))
        walk_s = time.monotonic() - started
        with capsys.disabled():
            print(f"fuzz: {len(cases)} mutated messages, decode_message {reference_s:.1f}s "
                  f"({failed} DecodeErrors), walk_dml (+ reference walk on 1 batch in 4) {walk_s:.1f}s "
                  f"({walk_errors} error rows)")
    finally:
        faulthandler.cancel_dump_traceback_later()
