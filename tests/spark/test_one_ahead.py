"""``bridge.one_ahead``: a partition's batches made in another thread, one ahead of Spark's thread.
Order, errors, how far ahead it gets, what closing it early does to the producer, and the threads
kept between partitions (one per partition read at once)."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest

from rmq_async.spark import bridge
from rmq_async.spark.bridge import READ_THREAD, one_ahead

pytestmark = pytest.mark.timeout(30)


def _busy_readers() -> int:
    """Reading threads that exist and are not idle."""
    alive = sum(t.name == READ_THREAD for t in threading.enumerate())
    with bridge._runners_lock:
        return alive - len(bridge._idle_runners)


def test_items_come_in_order_from_a_reading_thread() -> None:
    makers: set[str] = set()

    def items() -> Generator[int, None, None]:
        for i in range(50):
            makers.add(threading.current_thread().name)
            yield i

    assert list(one_ahead(items())) == list(range(50))
    assert makers == {READ_THREAD}
    assert _busy_readers() == 0


def test_an_error_of_the_producer_is_raised_after_the_items_before_it() -> None:
    class Boom(RuntimeError):
        pass

    def items() -> Generator[int, None, None]:
        yield 1
        yield 2
        raise Boom("pull failed")

    got: list[int] = []
    with pytest.raises(Boom, match="pull failed") as info:
        for x in one_ahead(items()):
            got.append(x)
    assert got == [1, 2]
    # the traceback still shows where it was raised, in the producer
    assert any(f.name == "items" for f in info.traceback)
    assert _busy_readers() == 0


def test_it_runs_at_most_two_items_ahead() -> None:
    made = 0
    third = threading.Event()
    fourth = threading.Event()

    def items() -> Generator[int, None, None]:
        nonlocal made
        for i in range(100):
            made += 1
            if made == 3:
                third.set()
            if made == 4:
                fourth.set()
            yield i

    gen = one_ahead(items())
    assert next(gen) == 0
    # one waits to be taken, one is being handed over: the producer gets to its third item ...
    assert third.wait(5)
    # ... and no further while the caller holds on to the first
    assert not fourth.wait(0.3)
    assert made == 3
    gen.close()
    assert _busy_readers() == 0


def test_closing_early_closes_the_producer_in_its_thread() -> None:
    closed_in: list[str] = []
    made = 0

    def items() -> Generator[int, None, None]:
        nonlocal made
        try:
            for i in range(1_000_000):
                made += 1
                yield i
        finally:  # a partition's pull_range closes (or releases) its connection here
            closed_in.append(threading.current_thread().name)

    gen = one_ahead(items())
    assert [next(gen), next(gen)] == [0, 1]
    gen.close()
    assert closed_in == [READ_THREAD]
    assert made <= 5
    assert _busy_readers() == 0


def test_a_generator_never_started_uses_no_thread() -> None:
    started = threading.Event()

    def items() -> Generator[int, None, None]:
        started.set()
        yield 1

    gen = one_ahead(items())
    gen.close()
    assert not started.is_set()
    assert _busy_readers() == 0


def test_partitions_one_after_the_other_reuse_one_thread() -> None:
    makers: set[int] = set()

    def items() -> Generator[int, None, None]:
        makers.add(threading.get_ident())
        yield from range(3)

    for _ in range(5):
        assert list(one_ahead(items())) == [0, 1, 2]
    assert len(makers) == 1


def test_two_partitions_read_interleaved_each_get_a_thread() -> None:
    """A caller that reads two partitions at once (zip) must not wait on a thread the other holds."""
    makers: list[int] = []

    def items(base: int) -> Generator[int, None, None]:
        makers.append(threading.get_ident())
        yield from range(base, base + 20)

    pairs = list(zip(one_ahead(items(0)), one_ahead(items(100)), strict=True))
    assert pairs == [(i, 100 + i) for i in range(20)]
    assert len(set(makers)) == 2
    assert _busy_readers() == 0
