"""``observed_plain``: the observers around a plain handler, as ``observed`` puts them around an async
one: each observer's token back with the result or the exception, nothing added for a call a
sampling observer does not watch."""

from __future__ import annotations

from typing import Any

import pytest

from rmq_async.consumer.observe import observed_plain
from rmq_async.consumer.stages import StageObserver, StageRecorder
from rmq_async.protocol.stored import MessageExt


class _Seen:
    def __init__(self) -> None:
        self.calls: list[tuple[object, object, object]] = []

    def before(self, batch: list[MessageExt]) -> object:
        return ("token", len(batch))

    def after(
        self, token: object, batch: list[MessageExt], result: object, error: BaseException | None
    ) -> None:
        self.calls.append((token, result, type(error).__name__ if error else None))


def _msgs(n: int) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x", queue_id=0, queue_offset=i) for i in range(n)]


def test_without_observers_the_handler_itself() -> None:
    def handler(msgs: list[MessageExt], ctx: Any) -> None:
        return None

    assert observed_plain(handler, []) is handler


@pytest.mark.parametrize("count", [1, 2])
def test_every_observer_sees_the_result_or_the_exception(count: int) -> None:
    obs = [_Seen() for _ in range(count)]

    def handler(msgs: list[MessageExt], ctx: Any) -> str:
        if ctx == "fail":
            raise RuntimeError("no")
        return "ok"

    wrapped = observed_plain(handler, obs)
    assert wrapped(_msgs(2), None) == "ok"
    with pytest.raises(RuntimeError):
        wrapped(_msgs(3), "fail")
    for o in obs:
        assert o.calls == [(("token", 2), "ok", None), (("token", 3), None, "RuntimeError")]


def test_a_sampling_observer_stamps_only_the_batches_it_watches() -> None:
    rec = StageRecorder(1)
    watched = _msgs(2)
    sample = rec.pulled(0, watched, 10, 20)
    assert sample is not None
    calls: list[int] = []

    def handler(msgs: list[MessageExt], ctx: Any) -> None:
        calls.append(len(msgs))

    wrapped = observed_plain(handler, [StageObserver(rec)])
    wrapped(_msgs(1), None)  # not watched: no stamp
    assert sample.entered == 0
    wrapped(watched[:1], None)
    assert sample.entered > 0 and sample.returned >= sample.entered
    assert calls == [1, 1]
