"""The soak's order accounting does not depend on the order in which member files are read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

from rmq_async.bench.soak import Member, Soak, SoakConfig


def _soak(tmp_path: Path, n: int) -> Soak:
    soak = Soak(SoakConfig(out=str(tmp_path)))
    for _ in range(n):  # what the producer's schedule appends per message
        soak.status.append(0)
        soak.seen.append(0)
        soak.send_t.append(0.0)
        soak.first_recv.append(math.inf)
    soak.scheduled = n
    return soak


def _member(name: str, kind: str) -> Member:
    return Member(name=name, kind=kind, path=Path("/dev/null"), proc=cast(Any, None))


def _line(idx: int, offset: int, t: float) -> bytes:
    return f"K soak-{idx} 0 broker-a 0 {offset} 0 {t:.6f}".encode()


def test_a_replay_read_before_the_earlier_first_consumption_is_a_replay(tmp_path: Path) -> None:
    # orderly-1 consumes offsets 0..5; its lease ends and orderly-2 consumes 6 and 7; the queue comes
    # back to orderly-1, which replays from the committed offset. The harness reads orderly-1's file
    # first: its offset 7 (t=11) comes below its 8 and before orderly-2's earlier consumption of 7 (t=8)
    # is read. By receive time it is a replay, not a message consumed out of order.
    soak = _soak(tmp_path, 10)
    a, b = _member("orderly-1", "orderly"), _member("orderly-2", "orderly")
    for i in range(6):
        soak.consumed_line(a, _line(i, i, 1.0 + i), 0.0)  # a: offsets 0..5 at t=1..6
    soak.consumed_line(a, _line(3, 3, 9.0), 0.0)  # replay of its own: seen before
    soak.consumed_line(a, _line(8, 8, 10.0), 0.0)
    soak.consumed_line(a, _line(7, 7, 11.0), 0.0)  # lower than 8, and a's first: b's (t=8) not read yet
    soak.consumed_line(b, _line(6, 6, 7.0), 0.0)
    soak.consumed_line(b, _line(7, 7, 8.0), 0.0)
    soak.settle_order()
    assert soak.order_violations == 0 and soak.orderly_replays == 2


def test_a_first_consumption_out_of_queue_order_is_a_violation(tmp_path: Path) -> None:
    soak = _soak(tmp_path, 10)
    a = _member("orderly-1", "orderly")
    soak.consumed_line(a, _line(0, 0, 1.0), 0.0)
    soak.consumed_line(a, _line(2, 2, 2.0), 0.0)
    soak.consumed_line(a, _line(1, 1, 3.0), 0.0)  # never consumed before, below offset 2
    soak.settle_order()
    assert soak.order_violations == 1 and soak.orderly_replays == 0
    assert soak.violations_by_queue == {"broker-a/0": 1}
