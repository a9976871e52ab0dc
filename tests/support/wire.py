"""Access to the captured frames in tests/fixtures (see tests/fixtures/WIRE-README.md)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent.parent / "fixtures"
CAPTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.jsonl"))


@dataclass(frozen=True)
class Frame:
    file: str
    seq: int
    conn: str
    dir: str
    peer: str
    serialize: str
    kind: str
    code: int
    opaque: int
    raw: bytes
    header: dict[str, Any]
    body_len: int
    body_json: Any

    @property
    def body(self) -> bytes:
        return self.raw[len(self.raw) - self.body_len :] if self.body_len else b""


@functools.cache
def frames(file: str) -> tuple[Frame, ...]:
    out = []
    with open(FIXTURES / file, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            out.append(
                Frame(
                    file=file,
                    seq=r["seq"],
                    conn=r["conn"],
                    dir=r["dir"],
                    peer=r["peer"],
                    serialize=r["serialize"],
                    kind=r["kind"],
                    code=r["code"],
                    opaque=r["opaque"],
                    raw=bytes.fromhex(r["frame_hex"]),
                    header=r["header"],
                    body_len=r["body_len"],
                    body_json=r.get("body_json"),
                )
            )
    return tuple(out)


def all_frames() -> Iterator[Frame]:
    for f in CAPTURE_FILES:
        yield from frames(f)


def pairs(file: str) -> Iterator[tuple[Frame, Frame | None]]:
    """(request, response) pairs of a file, by (conn, opaque) with directions reversed."""
    pending: dict[tuple[str, str, int], Frame] = {}
    order: list[tuple[str, str, int]] = []
    for fr in frames(file):
        if fr.kind in ("request", "oneway"):
            key = (fr.conn, fr.dir, fr.opaque)
            pending[key] = fr
            order.append(key)
        else:
            back = "c2s" if fr.dir == "s2c" else "s2c"
            req = pending.pop((fr.conn, back, fr.opaque), None)
            if req is not None:
                yield req, fr
    for key in order:
        if key in pending:
            yield pending.pop(key), None
