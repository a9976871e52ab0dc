"""``bridge.quick_ack_spark_connection``: TCP_QUICKACK on a Python worker's connection to Spark's JVM,
found from pyspark's frames. Without it every task after a reused worker's first waited 40 ms for its
input (Nagle on the JVM's side, delayed acknowledgement on the worker's)."""

from __future__ import annotations

import os
import socket
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rmq_async.spark import bridge

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")


def as_pyspark_main(fn: Callable[[], bool], *, as_script: bool = False) -> Callable[[Any, Any], bool]:
    """A function named ``main`` in a module named ``pyspark.worker`` (or run as ``__main__`` by
    ``python -m pyspark.worker``) that calls ``fn``."""
    scope: dict[str, Any] = {"__name__": "pyspark.worker", "fn": fn}
    if as_script:
        scope.update(__name__="__main__", __spec__=types.SimpleNamespace(name="pyspark.worker"))
    exec("def main(infile, outfile):\n    return fn()\n", scope)
    return scope["main"]  # type: ignore[no-any-return]


def tcp_pair() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        client = socket.create_connection(srv.getsockname())
        accepted, _ = srv.accept()
    yield from (client, accepted)


@pytest.mark.parametrize("as_script", [False, True])
def test_the_connection_pyspark_writes_to_is_set(as_script: bool) -> None:
    client, accepted = tcp_pair()
    with client, accepted, os.fdopen(os.dup(accepted.fileno()), "wb") as outfile:
        assert as_pyspark_main(bridge.quick_ack_spark_connection, as_script=as_script)(None, outfile) is True
        assert accepted.fileno() >= 0  # the duplicate was closed, not the connection
        accepted.sendall(b"x")
        assert client.recv(1) == b"x"


def test_nothing_is_done_outside_pyspark_or_on_a_unix_socket() -> None:
    assert bridge.quick_ack_spark_connection() is False
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b, os.fdopen(os.dup(a.fileno()), "wb") as outfile:
        assert as_pyspark_main(bridge.quick_ack_spark_connection)(None, outfile) is False
    assert as_pyspark_main(bridge.quick_ack_spark_connection)(None, object()) is False
    # another module's main, or a script that is not pyspark's worker
    scope: dict[str, Any] = {"__name__": "__main__", "fn": bridge.quick_ack_spark_connection}
    exec("def main(infile, outfile):\n    return fn()\n", scope)
    client, accepted = tcp_pair()
    with client, accepted, os.fdopen(os.dup(accepted.fileno()), "wb") as outfile:
        assert scope["main"](None, outfile) is False


@pytest.mark.spark
def test_a_spark_worker_connection_is_found(spark: Any) -> None:
    # pyspark's own frames, in a real Python worker: the lookup must keep working with the installed
    # pyspark (a renamed main would silently bring the 40 ms back)
    rdd = spark.sparkContext.parallelize([0], 1)
    assert rdd.map(lambda _: bridge.quick_ack_spark_connection()).collect() == [sys.platform == "linux"]


def test_readers_set_it_when_a_task_unpickles_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # a task's command carries the reader: unpickled before the task's input is read, so the
    # acknowledgement the JVM waits for goes at once, also after another source's task in the worker
    import pickle

    from rmq_async.spark import source
    from rmq_async.spark.options import parse_options

    calls: list[str] = []

    def ack() -> bool:
        calls.append("ack")
        return True

    monkeypatch.setattr(source, "quick_ack_spark_connection", ack)
    raw = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    batch = source.RocketMQBatchReader(parse_options(raw, streaming=False))
    assert calls == []
    copy = pickle.loads(pickle.dumps(batch))
    assert calls == ["ack"] and copy.opts == batch.opts
    stream = source.RocketMQStreamReader(parse_options(raw, streaming=True))
    again = pickle.loads(pickle.dumps(stream))
    assert calls == ["ack", "ack"] and again.opts == stream.opts and again._bridge is None
