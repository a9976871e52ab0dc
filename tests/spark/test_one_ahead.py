"""``bridge.one_ahead``: a partition's batches made by a thread of their own, one ahead of Spark's
thread. Order, errors, how far ahead it gets, and what closing it early does to the producer."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest

from rmq_async.spark.bridge import one_ahead

pytestmark = pytest.mark.timeout(30)


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_items_come_in_order_from_another_thread() -> None:
    makers: set[str] = set()

    def items() -> Generator[int, None, None]:
        for i in range(50):
            makers.add(threading.current_thread().name)
            yield i

    assert list(one_ahead(items(), name="ahead-order")) == list(range(50))
    assert makers == {"ahead-order"}
    assert not _threads("ahead-order")


def test_an_error_of_the_producer_is_raised_after_the_items_before_it() -> None:
    class Boom(RuntimeError):
        pass

    def items() -> Generator[int, None, None]:
        yield 1
        yield 2
        raise Boom("pull failed")

    got: list[int] = []
    with pytest.raises(Boom, match="pull failed") as info:
        for x in one_ahead(items(), name="ahead-error"):
            got.append(x)
    assert got == [1, 2]
    # the traceback still shows where it was raised, in the producer
    assert any(f.name == "items" for f in info.traceback)
    assert not _threads("ahead-error")


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

    gen = one_ahead(items(), name="ahead-bound")
    assert next(gen) == 0
    # one waits to be taken, one is being handed over: the producer gets to its third item ...
    assert third.wait(5)
    # ... and no further while the caller holds on to the first
    assert not fourth.wait(0.3)
    assert made == 3
    gen.close()
    assert not _threads("ahead-bound")


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

    gen = one_ahead(items(), name="ahead-close")
    assert [next(gen), next(gen)] == [0, 1]
    gen.close()
    assert closed_in == ["ahead-close"]
    assert made <= 5
    assert not _threads("ahead-close")


def test_a_generator_never_started_starts_no_thread() -> None:
    def items() -> Generator[int, None, None]:
        yield 1

    gen = one_ahead(items(), name="ahead-idle")
    assert not _threads("ahead-idle")
    gen.close()
    assert not _threads("ahead-idle")
