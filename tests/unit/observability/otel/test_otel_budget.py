"""OpenTelemetry recording budgets: the sampler picks at most its rate a second, spread over the
calls (not the first ones of each window, nor one position of a periodic pattern), every call without a
budget; the consume observer picks at the pull, looks handler calls up, and keeps every message with a
sampled traceparent for a span (SDK in-memory reader and exporter; a fake clock)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from support.otel_sdk import InMemorySDK

from rmq_async import ConsumeResult, MessageExt, MessageQueue
from rmq_async.config import OtelConfig
from rmq_async.consumer.observe import observed
from rmq_async.consumer.stats import ConsumerStats
from rmq_async.observability import otel

TP = "00-0af7651916cd43dd8448eb211c80319c-{:016x}-{}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(time, "monotonic", c)  # what the otel module reads
    return c


def _calls(s: otel.Sampler, n: int) -> list[int]:
    out = []
    for i in range(n):
        s.countdown -= 1
        if s.countdown <= 0 and s.fire():
            out.append(i)
    return out


def test_no_budget_picks_every_call(clock: Clock) -> None:
    s = otel.Sampler(None)
    assert _calls(s, 10_000) == list(range(10_000))
    assert s.picks(7) == list(range(7))


def _second(s: otel.Sampler, clock: Clock, calls: int) -> list[int]:
    """``calls`` calls over one second of the fake clock, in tenths (the pull loop ticks between)."""
    out: list[int] = []
    for tenth in range(10):
        base = tenth * (calls // 10)
        out += [base + i for i in _calls(s, calls // 10)]
        clock.now += 0.1
        s.tick(clock.now)
    return out


def test_the_budget_caps_picks_per_second_and_spreads_them(clock: Clock) -> None:
    s = otel.Sampler(100)  # windows of a tenth of a second, 10 picks each
    first = _second(s, clock, 100_000)  # the first tenth does not know the rate yet
    assert 10 <= len(first) <= 100
    assert first[-1] > 70_000  # even so, not all at the start of the second
    for second in range(1, 6):
        picked = _second(s, clock, 100_000)
        # the stride follows the last tenth's rate: about the budget, never more
        assert 50 <= len(picked) <= 100, (second, len(picked))
        assert picked[-1] > 90_000 and picked[0] < 10_000, picked[:3]


def test_a_burst_within_a_window_stays_within_the_budget(clock: Clock) -> None:
    s = otel.Sampler(100)
    _second(s, clock, 10_000)
    assert len(_calls(s, 1_000_000)) <= 10  # a thousand times the last tenth's rate, one tenth


def test_a_slow_budget_has_one_second_windows(clock: Clock) -> None:
    s = otel.Sampler(5)
    assert len(_calls(s, 1000)) == 5
    clock.now += 0.5
    s.tick(clock.now)
    assert _calls(s, 1000) == []
    clock.now += 0.5
    s.tick(clock.now)
    assert 1 <= len(_calls(s, 1000)) <= 5


def test_a_rate_that_falls_is_followed_at_the_next_tick(clock: Clock) -> None:
    s = otel.Sampler(100)
    _second(s, clock, 1_000_000)
    _second(s, clock, 1_000_000)  # stride about 10,000
    _calls(s, 5)
    clock.now += 0.1
    s.tick(clock.now)  # the last tenth saw 5 calls: every call is picked again
    assert _calls(s, 5) == list(range(5))


def test_batch_picks_match_the_budget_and_favour_no_position(clock: Clock) -> None:
    s = otel.Sampler(1000)  # 100 picks a tenth of a second
    for _ in range(100):
        s.picks(32)
    clock.now += 0.1
    s.tick(clock.now)  # 3,200 calls a tenth: a stride of 32, the pulled batch's size
    positions: Counter[int] = Counter()
    total = 0
    for _ in range(10):
        for _ in range(100):
            got = s.picks(32)
            assert all(0 <= i < 32 for i in got)
            positions.update(got)
            total += len(got)
        clock.now += 0.1
        s.tick(clock.now)
    assert 500 <= total <= 1000
    assert len(positions) > 16  # not the same index of every batch


def test_a_zero_budget_picks_nothing(clock: Clock) -> None:
    s = otel.Sampler(0)
    assert _calls(s, 1000) == []
    clock.now += 1.0
    s.tick(clock.now)
    assert _calls(s, 1000) == [] and s.picks(100) == []


# -- the consume observer --------------------------------------------------------------------------


class _Ctx:
    def __init__(self) -> None:
        self.stats = ConsumerStats()
        self.has_offset_store = False
        self.offset_store = None


class _PQ:
    def __init__(self) -> None:
        self.mq = MessageQueue("T", "b", 0)
        self.dropped = False
        self.max_offset = -1
        self.msg_bytes = 0
        self.count = 0


@pytest.fixture
def sdk() -> Iterator[InMemorySDK]:
    s = InMemorySDK()
    yield s
    s.shutdown()


def _msgs(n: int, traced: bool = False, start: int = 0) -> list[MessageExt]:
    now = int(time.time() * 1000)

    def props(i: int) -> dict[str, str]:
        return {"traceparent": TP.format(i + 1, "01")} if traced else {"KEYS": f"k{i}"}

    return [MessageExt("T", b"x", properties=props(start + i), store_timestamp=now) for i in range(n)]


async def _consume(o: otel.ConsumeObserver, msgs: list[MessageExt], pq: _PQ) -> None:
    async def handler(batch: list[MessageExt], ctx: Any) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    h = observed(handler, [o])
    for i in range(0, len(msgs), 32):
        o.pulled(pq, msgs[i : i + 32], 0.001)
        for m in msgs[i : i + 32]:
            await h([m], None)


def _observer(mp: Any, tp: Any, config: OtelConfig) -> otel.ConsumeObserver:
    t = otel.Telemetry(mp, tp)
    return otel.ConsumeObserver(t, "g", "client", _Ctx(), config)


async def test_a_small_budget_records_a_sample(sdk: InMemorySDK, clock: Clock) -> None:
    o = _observer(sdk.mp, None, OtelConfig(histogram_rate=10))
    await _consume(o, _msgs(3200), _PQ())
    counts = sdk.counts()
    # one window (the fake clock stands still; 10/s: one-second windows): 10 values, not 3200
    for name in ("rocketmq_delivery_latency", "rocketmq_await_time", "rocketmq_process_time"):
        assert counts[name] == 10, (name, counts)
    assert counts["rocketmq_pull_latency"] == 10
    assert o.watching() == 0  # every picked message was consumed and looked up


async def test_no_budget_records_every_message(sdk: InMemorySDK, clock: Clock) -> None:
    o = _observer(sdk.mp, None, OtelConfig(histogram_rate=None))
    await _consume(o, _msgs(320), _PQ())
    counts = sdk.counts()
    for name in ("rocketmq_delivery_latency", "rocketmq_await_time", "rocketmq_process_time"):
        assert counts[name] == 320, (name, counts)
    assert counts["rocketmq_pull_latency"] == 10


async def test_traced_messages_always_get_a_span_others_within_the_budget(
    sdk: InMemorySDK, clock: Clock
) -> None:
    exporter, tp = sdk.exporter, sdk.tp
    o = _observer(None, tp, OtelConfig(root_span_rate=5))
    plain, traced = _msgs(640), _msgs(320, traced=True)
    await _consume(o, plain[:320] + traced + plain[320:], _PQ())
    spans = exporter.get_finished_spans()
    linked = [s for s in spans if s.links]
    assert len(linked) == 320  # every message with a sampled traceparent
    assert sorted(s.links[0].context.span_id for s in linked) == list(range(1, 321))
    assert all(s.links[0].context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C for s in linked)
    assert len(spans) - len(linked) <= 5  # the others: within the root span budget


async def test_unsampled_parents_follow_the_root_budget_and_the_sampler_decides(
    sdk: InMemorySDK, clock: Clock
) -> None:
    exporter, tp = sdk.exporter, sdk.tp
    o = _observer(None, tp, OtelConfig(root_span_rate=0))
    msgs = [MessageExt("T", b"x", properties={"traceparent": TP.format(i + 1, "00")}) for i in range(64)]
    await _consume(o, msgs, _PQ())
    assert exporter.get_finished_spans() == ()  # not sampled upstream, no root budget: no span
    off = TracerProvider(sampler=ALWAYS_OFF)
    off.add_span_processor(SimpleSpanProcessor(exporter))
    o = _observer(None, off, OtelConfig(root_span_rate=None))
    await _consume(o, _msgs(64, traced=True), _PQ())
    assert exporter.get_finished_spans() == ()  # started, and the application's sampler said no


async def test_counters_count_every_message(sdk: InMemorySDK, clock: Clock) -> None:
    ctx = _Ctx()
    o = otel.ConsumeObserver(otel.Telemetry(sdk.mp, None), "g", "client", ctx, OtelConfig(histogram_rate=1))
    stats = ctx.stats
    stats.pulled("T", 1000, 0.01)  # what the services count (plain ints), read at collection
    stats.consumed("T", 990, 0.0, ok=True)
    stats.consumed("T", 10, 0.0, ok=False)
    o.polled([MessageExt("L", b"x") for _ in range(7)])  # a lite-pull poll
    data = sdk.reader.get_metrics_data()
    assert data is not None
    got: dict[tuple[str, str], int] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    a = dict(p.attributes or {})
                    key = (m.name, f"{a.get('topic')}/{a.get('invocation_status', '')}")
                    got[key] = getattr(p, "value", -1)
    assert got[("rocketmq_consumer_pulled_messages", "T/")] == 1000
    assert got[("rocketmq_consumer_processed_messages", "T/success")] == 990
    assert got[("rocketmq_consumer_processed_messages", "T/failure")] == 10
    assert got[("rocketmq_consumer_processed_messages", "L/success")] == 7


async def test_watched_messages_never_consumed_are_forgotten(sdk: InMemorySDK, clock: Clock) -> None:
    t = otel.Telemetry(sdk.mp, None)
    o = otel.ConsumeObserver(t, "g", "c", _Ctx(), OtelConfig(histogram_rate=None), max_age=10.0)
    o.pulled(_PQ(), _msgs(32), 0.001)  # a queue dropped before its messages were consumed
    assert o.watching() == 32
    clock.now += 61.0
    o.pulled(_PQ(), _msgs(1), 0.001)
    assert o.watching() == 1


def test_the_configs_are_public() -> None:
    import rmq_async

    for name in ("TraceConfig", "OtelConfig"):
        assert name in rmq_async.__all__ and getattr(rmq_async, name) is not None
    assert rmq_async.ClientConfig(trace=True, otel={"histogram_rate": None}).otel.histogram_rate is None
    assert rmq_async.OtelConfig().histogram_rate == 200 and rmq_async.OtelConfig().root_span_rate == 100
    assert all(f.description for f in rmq_async.OtelConfig.model_fields.values())
