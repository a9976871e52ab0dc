"""Fuzzing the two decoders that read peer bytes: FrameDecoder.feed and decode_messages.

Inputs are the captured frames and pull bodies, re-chunked or mutated (flipped bytes, rewritten
length fields, cuts, junk), plus random bytes. The only exception allowed out is ProtocolError;
re-chunking real frames must give exactly what decoding them one by one gives. The number of inputs
is set by each test's hypothesis ``max_examples`` (no deadline: CI machines vary). The inputs each
decoder was actually given are counted (``INPUTS``) and, when every fuzz test of this module ran and
passed, saved at module teardown under ``.pytest_cache/rmq_reliability/`` (to the tracked
``tests/reliability/fuzz/hypothesis.json`` only with ``RMQ_WRITE_RELIABILITY_REPORT=1``, or by
``python -m tests.reliability.report``); the reliability suite's README shows them next to the atheris
figures.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.report import save_fuzz_counts
from support.wire import CAPTURE_FILES, frames

from rmq_async.errors import ProtocolError
from rmq_async.protocol.command import FrameDecoder, RemotingCommand, decode_frame
from rmq_async.protocol.stored import decode_messages

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_TESTS = (
    "test_rechunked_real_frames_decode_identically",
    "test_random_bytes",
    "test_mutated_frames",
    "test_mutated_pull_bodies",
)

#: fuzzed inputs given to each decoder (names as in the atheris harness), and examples per test
INPUTS: Counter[str] = Counter()
EXAMPLES: Counter[str] = Counter()

RAW_FRAMES: list[bytes] = [fr.raw for f in CAPTURE_FILES for fr in frames(f)]
PULL_BODIES: list[bytes] = sorted(
    {
        fr.body
        for f in CAPTURE_FILES
        for fr in frames(f)
        if fr.body_len >= 8
        and fr.body[4:8] == b"\xda\xa3\x20\xa7"
        and (fr.kind == "response" or fr.code == 309)
    },
    key=len,
)


@pytest.fixture(scope="module", autouse=True)
def _write_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    t0, failed = time.monotonic(), request.session.testsfailed
    yield
    # a partial run (-k) or a failure keeps the last full figures
    if set(EXAMPLES) == set(FUZZ_TESTS) and request.session.testsfailed == failed:
        save_fuzz_counts(
            {
                "run_at": time.strftime("%Y-%m-%d %H:%M"),
                "max_examples": FUZZ.max_examples,
                "seconds": round(time.monotonic() - t0, 1),
                "inputs_per_decoder": dict(sorted(INPUTS.items())),
                "examples_per_test": {t: EXAMPLES[t] for t in FUZZ_TESTS},
            }
        )


def feed_all(chunks: list[bytes], max_frame: int = 16 << 20) -> list[RemotingCommand]:
    """Feed chunks; only ProtocolError may escape, and after one the decoder stays failed."""
    INPUTS["frame_decoder"] += 1
    decoder = FrameDecoder(max_frame)
    out: list[RemotingCommand] = []
    for chunk in chunks:
        try:
            out += decoder.feed(chunk)
        except ProtocolError:
            try:
                decoder.feed(b"")
            except ProtocolError:
                return out
            raise AssertionError("the decoder accepted input after an error") from None
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@FUZZ
@given(st.data())
def test_rechunked_real_frames_decode_identically(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(RAW_FRAMES) - 1))
    picked = RAW_FRAMES[start : start + data.draw(st.integers(1, 40))]
    stream = b"".join(picked)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=60))
    decoded = feed_all(split(stream, cuts))
    assert decoded == [decode_frame(raw) for raw in picked]
    EXAMPLES["test_rechunked_real_frames_decode_identically"] += 1


@FUZZ
@given(st.binary(max_size=2048), st.lists(st.integers(0, 2048), max_size=8))
def test_random_bytes(blob: bytes, cuts: list[int]) -> None:
    feed_all(split(blob, cuts), max_frame=1 << 16)
    EXAMPLES["test_random_bytes"] += 1


def _mutate(data: st.DataObject, raw: bytes) -> bytes:
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "length", "header_length", "cut", "junk"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "length" and len(buf) >= 4:
            buf[0:4] = struct.pack(
                ">i", data.draw(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 2 * len(buf)))
            )
        elif kind == "header_length" and len(buf) >= 8:
            buf[5:8] = data.draw(st.integers(0, 0xFFFFFF)).to_bytes(3, "big")
            buf[4] = data.draw(st.sampled_from([0, 1, 2, 255]))
        elif kind == "cut":
            del buf[pos:]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    return bytes(buf)


@FUZZ
@given(st.data())
def test_mutated_frames(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(RAW_FRAMES) - 1))
    picked = RAW_FRAMES[start : start + data.draw(st.integers(1, 4))]
    stream = b"".join(_mutate(data, raw) for raw in picked)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    feed_all(split(stream, cuts), max_frame=1 << 20)
    INPUTS["decode_frame"] += 1
    with contextlib.suppress(ProtocolError):
        decode_frame(stream)
    EXAMPLES["test_mutated_frames"] += 1


def _mutate_body(data: st.DataObject, body: bytes) -> bytes:
    buf = bytearray(body)
    starts = [0]
    while starts[-1] + 4 <= len(body) and (size := struct.unpack_from(">i", body, starts[-1])[0]) > 0:
        if starts[-1] + size >= len(body):
            break
        starts.append(starts[-1] + size)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "field", "cut", "junk"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "field":  # an int field of a message: total size, magic, sys flag, body length, ...
            at = data.draw(st.sampled_from(starts)) + data.draw(
                st.sampled_from([0, 4, 36, 84, 88, 96, 100, 112])
            )
            if at + 4 <= len(buf):
                buf[at : at + 4] = struct.pack(
                    ">i", data.draw(st.integers(-(2**31), 2**31 - 1) | st.integers(-8, 300))
                )
        elif kind == "cut":
            del buf[pos:]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    return bytes(buf)


@FUZZ
@given(st.data())
def test_mutated_pull_bodies(data: st.DataObject) -> None:
    body = data.draw(st.sampled_from(PULL_BODIES))
    mutated = _mutate_body(data, body)
    INPUTS["decode_messages"] += 1  # one input, decoded with and without the properties check
    EXAMPLES["test_mutated_pull_bodies"] += 1
    for check in (False, True):
        try:
            msgs = decode_messages(mutated, check_properties=check)
        except ProtocolError:
            continue
        for m in msgs:  # whatever decodes is usable without other exceptions
            _ = (m.properties, m.tags, m.msg_id, m.keys, m.born_host, m.store_host, m.offset_msg_id, repr(m))


def test_inventory() -> None:
    assert len(RAW_FRAMES) == 2568 and len(PULL_BODIES) > 50
