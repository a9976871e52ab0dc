"""What the embedded broker's request handlers work with: :class:`BrokerContext`.

Strategy: the broker listens, opens its store (:func:`open_store`: the store host is the listening
address) and only then builds one context, so the store in it is never missing. Each handler module
(send, pull, delay, clients, admin, pop) exposes ``handlers(ctx)`` returning its ``{request code:
handler}`` table, built once: a handler is a closure over the context (hot paths keep what they need
in locals) or, in pop, a module-level function of it bound with ``functools.partial``; never a lookup
on the broker. The context is plain data (settings, configuration state, the store,
consumer and producer tables, queue locks, parked pulls) plus the few operations several handlers
share, each following a Java broker method: the response builder, the flavour's property serializer,
``createTopicInSendMessageBackMethod``, group auto-creation and :meth:`BrokerContext.put`
(``CommitLog.putMessage``: a delay level sends the message to the schedule topic; parked pulls on its
queue are woken at once). What belongs to the broker's lifecycle (registering with the name server,
running a job in its task group) comes in as callables, so no handler module knows the broker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from ..config import Timing
from ..protocol.codes import MQ_VERSION_V4_9_8, MQ_VERSION_V5_3_3
from ..protocol.command import RemotingCommand
from .filters import FilterManager
from .groups import ConsumerManager, LockManager, ProducerManager
from .holds import HoldService
from .jcompat import delay_level, java_ext, java_sized_capacity, props_decode, props_encode, tags_code_of
from .pop_state import PopState
from .server import Connection, Reply
from .state import SCHEDULE_TOPIC, TIMER_TOPIC, BrokerState, TopicConfig
from .store import (
    MAX_TRANSFER_BYTES,
    MAX_TRANSFER_COUNT,
    MessageStore,
    PutResult,
    TagsCodeFn,
    host_bytes,
    now_ms,
)

__all__ = [
    "BrokerContext",
    "BrokerSettings",
    "Handler",
    "HandlerTable",
    "Spawn",
    "Wakeup",
    "open_store",
    "recovery_tags_code",
]

#: a request handler: the response, the response and its body slices, or None (answered later)
Handler = Callable[[Connection, RemotingCommand], Reply]
HandlerTable = dict[int, Handler]


class Spawn(Protocol):
    """Run ``fn(*args)`` in the broker's task group (a request answered later)."""

    def __call__(self, fn: Callable[..., Awaitable[object]], /, *args: object) -> None: ...


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """One broker's fixed configuration (broker id 0 of ``cluster``)."""

    name: str
    cluster: str
    namesrv_addr: str
    timing: Timing
    flavour: int  # 4: answer as RocketMQ 4.9.8; 5: as 5.3.3 where the captures differ
    queues: int
    auto_create_topic: bool
    data_dir: Path | None
    delay_levels: tuple[float, ...]  # seconds; level 1 is the first
    #: ``BrokerConfig.enablePropertyFilter``: serve SQL92 subscriptions (off by default, as Java's)
    enable_property_filter: bool = False
    #: ``BrokerConfig.filterSupportRetry``: filter the retry topic too (4.x; see ``filters.py``)
    filter_support_retry: bool = False
    #: ``BrokerConfig.traceTopicEnable`` / ``msgTraceTopicName``: create the trace topic at start
    trace_topic_enable: bool = False
    trace_topic: str = "RMQ_SYS_TRACE_TOPIC"
    #: ``MessageStoreConfig.maxTransferCountOnMessageInMemory`` / ``maxTransferBytesOnMessageInMemory``:
    #: what one pull answers at most (this store keeps every message in memory: no "in disk" limits)
    max_transfer_count: int = MAX_TRANSFER_COUNT
    max_transfer_bytes: int = MAX_TRANSFER_BYTES
    #: ``MessageStoreConfig.timerPrecisionMs`` / ``timerMaxDelaySec`` (5.x timer messages)
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3 * 24 * 3600
    version: int = field(init=False)  # the broker's MQVersion, written in every command
    delay_ms: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "version", MQ_VERSION_V5_3_3 if self.flavour == 5 else MQ_VERSION_V4_9_8)
        object.__setattr__(self, "delay_ms", tuple(round(s * 1000) for s in self.delay_levels))


class Wakeup:
    """A wake-up call from synchronous code to the one task that waits for it; a call made while
    nobody waits is kept for the next wait."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Return once called (or after ``timeout`` seconds); the call is then used up."""
        with anyio.move_on_after(timeout):
            await self._event.wait()
        self._event = anyio.Event()


def recovery_tags_code(delay_ms: tuple[int, ...], timer_precision_ms: int = 1000) -> TagsCodeFn:
    """The consume-queue tag code of a recovered message (a delivery time in the schedule topic
    and in the timer topic)."""

    def tags_code(topic: str, props: str, store_ts: int) -> int:
        p = props_decode(props)
        if topic == SCHEDULE_TOPIC:
            return store_ts + delay_ms[min(int(p.get("DELAY", "1")), len(delay_ms)) - 1]
        if topic == TIMER_TOPIC:
            return int(p.get("TIMER_OUT_MS", "0") or 0) + timer_precision_ms
        return tags_code_of(p)

    return tags_code


def open_store(settings: BrokerSettings, port: int) -> tuple[MessageStore, int]:
    """The broker's store for its listening ``port``, opened; and the number of messages recovered."""
    store = MessageStore(
        host_bytes("127.0.0.1", port),
        settings.data_dir,
        max_transfer_count=settings.max_transfer_count,
        max_transfer_bytes=settings.max_transfer_bytes,
    )
    return store, store.open(recovery_tags_code(settings.delay_ms, settings.timer_precision_ms))


@dataclass(eq=False, slots=True)
class BrokerContext:
    """Everything a request handler of one running broker may use."""

    settings: BrokerSettings
    state: BrokerState
    store: MessageStore
    consumers: ConsumerManager
    producers: ProducerManager
    locks: LockManager
    holds: HoldService
    spawn: Spawn
    register: Callable[[], Awaitable[None]]  # REGISTER_BROKER now (raises when the name server fails)
    register_soon: Callable[[], None]  # ask the registration loop to register at once
    delayed: Wakeup = field(default_factory=Wakeup)  # a message was put in the schedule topic
    timed: Wakeup = field(default_factory=Wakeup)  # a message was put in the timer topic (5.x)
    #: a request to the name server (QUERY_ASSIGNMENT reads the topic's route, as the Java broker's
    #: TopicRouteInfoManager); None: not connected to one
    namesrv_request: Callable[[RemotingCommand, float], Awaitable[RemotingCommand | None]] | None = None
    filters: FilterManager = field(init=False)  # the groups' SQL92 filters (ConsumerFilterManager)
    pop: PopState = field(default_factory=PopState)  # 5.x POP: request modes, checkpoints (pop.py)

    def __post_init__(self) -> None:
        self.filters = FilterManager(5 if self.settings.flavour == 5 else 4)

    def respond(
        self,
        cmd: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """A response in the request's serialize type; ``ext`` None leaves ``extFields`` out."""
        return cmd.make_response(
            int(code), remark, java_ext(ext) if ext else ext, body, version=self.settings.version
        )

    def encode_props(self, props: dict[str, str], capacity: int | None = None) -> str:
        """``messageProperties2String`` of a map made by ``string2messageProperties``.

        4.9.8 builds it with ``new HashMap()`` (grows from 16), 5.3.3 with ``new HashMap(128)`` and
        keeps the trailing separator.
        """
        if self.settings.flavour == 5:
            return props_encode(props, capacity=java_sized_capacity(128, len(props)), trailing=True)
        return props_encode(props, capacity=capacity)

    def create_topic_in_back_method(
        self, topic: str, queues: int, perm: int, sys_flag: int = 0
    ) -> TopicConfig:
        """``createTopicInSendMessageBackMethod``: the topic, created (and registered soon) if new."""
        tc = self.state.topics.get(topic)
        if tc is None:
            tc = TopicConfig(topic, queues, queues, perm, sys_flag)
            self.state.put_topic(tc)
            self.register_soon()
        return tc

    def find_group(self, group: str) -> bool:
        """``findSubscriptionGroupConfig`` with auto-creation (always succeeds here)."""
        self.state.add_group(group)
        return True

    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        props: dict[str, str],
        props_str: str,
        sys_flag: int,
        born_ts: int,
        born_host: bytes,
        reconsume_times: int = 0,
    ) -> PutResult:
        """``CommitLog.putMessage``: a DELAY > 0 goes to the schedule topic; holds are notified."""
        store_ts = None
        tags_code = tags_code_of(props)
        level = delay_level(props)
        tran = (sys_flag >> 2) & 0x3
        if level > 0 and tran in (0, 2):
            delay_ms = self.settings.delay_ms
            level = min(level, len(delay_ms))
            props["REAL_TOPIC"] = topic
            props["REAL_QID"] = str(queue_id)
            props_str = self.encode_props(props)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            store_ts = now_ms()
            tags_code = store_ts + delay_ms[level - 1]
        res = self.store.put(
            topic,
            queue_id,
            body,
            flag,
            props_str,
            tags_code,
            sys_flag,
            born_ts,
            born_host,
            reconsume_times,
            store_ts=store_ts,
        )
        if topic == SCHEDULE_TOPIC:
            self.delayed.set()
        else:
            self.holds.notify(topic, queue_id, res.queue_offset + 1, tags_code, props_str)
        return res
