"""Queue allocation strategies that give exactly the Java client's answers.

Strategy: consumer groups mix Java and Python members, and each member computes its own share
from the same sorted inputs, so every strategy here is a line-by-line behavioural twin of
``org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueue*`` (4.9.8 and 5.3.3 agree):
the same index arithmetic, the same ``check()`` messages, the same MD5 ring with the same
virtual-node keys, the same ``TreeMap`` iteration order (Java ``String.compareTo``, i.e. UTF-16
code units, which differs from Python's code-point order beyond the BMP). Everything here is a
pure function of its arguments: no I/O, no clock, no randomness, no cached state.

``sort_for_allocation`` reproduces what ``RebalanceImpl.rebalanceByTopic`` does before calling a
strategy (the queue set copied to a list and ``Collections.sort``-ed, the consumer id list sorted
as Java strings); callers must pass its output, as Java does, or members disagree.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from rmq_async.errors import ConfigError
from rmq_async.protocol.mq import MessageQueue
from rmq_async.protocol.strategies import canonical_strategy

__all__ = [
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateByConfig",
    "AllocateByMachineRoom",
    "AllocateConsistentHash",
    "AllocateMachineRoomNearby",
    "AllocateStrategy",
    "ConsistentHashRing",
    "MachineRoomResolver",
    "java_md5_hash",
    "java_string_compare_key",
    "sort_for_allocation",
    "strategy_by_name",
]


@runtime_checkable
class AllocateStrategy(Protocol):
    """What ``AllocateMessageQueueStrategy`` is in Java: a name and an ``allocate`` function."""

    @property
    def name(self) -> str:
        """The Java ``getName()`` value ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", ...)."""
        ...

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues of ``mq_all`` that ``current_cid`` owns among ``cid_all`` (both sorted)."""
        ...


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Java ``AllocateMachineRoomNearby.MachineRoomResolver``: which room a broker or client is in.

    Neither method may return ``None`` or an empty string (``ValueError`` when it does).
    """

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        """The machine room of the broker hosting ``mq``."""
        ...

    def consumer_deploy_in(self, client_id: str) -> str:
        """The machine room of the consumer ``client_id``."""
        ...


# --------------------------------------------------------------------------------------------
# Java string semantics


def java_string_compare_key(s: str) -> bytes:
    """A sort key that orders strings like Java's ``String.compareTo``.

    Java compares UTF-16 code units, then lengths. Big-endian UTF-16 bytes compare bytewise in
    exactly that order (a shorter prefix sorts first). ``surrogatepass`` keeps lone surrogates,
    which Java strings may hold too.
    """
    return s.encode("utf-16-be", "surrogatepass")


def _java_utf8(s: str) -> bytes:
    # String.getBytes(UTF_8): surrogate pairs become one 4-byte sequence, a lone surrogate
    # becomes '?'. A Python str may hold a pair as two code points: re-join it via UTF-16 first.
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        joined = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def _to_java_long(value: int) -> int:
    # A Java HashFunction returns a long: wrap like Java arithmetic would.
    return ((value + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def java_md5_hash(key: str) -> int:
    """``ConsistentHashRouter.MD5Hash.hash``: the first 4 MD5 digest bytes, big-endian, unsigned.

    The key is hashed as UTF-8 (explicit in 5.x; 4.x uses the JVM default charset, UTF-8 on
    Linux and on JDK 18+). The result lies in ``0 .. 2**32 - 1``.
    """
    digest = hashlib.md5(_java_utf8(key), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


def _mq_sort_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    return (java_string_compare_key(mq.topic), java_string_compare_key(mq.broker_name), mq.queue_id)


def sort_for_allocation(
    mq_all: Iterable[MessageQueue], cid_all: Iterable[str]
) -> tuple[list[MessageQueue], list[str]]:
    """Prepare the inputs of ``allocate`` as ``RebalanceImpl`` does.

    The queues come from a ``Set`` in Java, so duplicates are dropped; then both lists are sorted:
    queues by topic, broker name (Java string order) and queue id, client ids as Java strings.
    Duplicate client ids are kept (Java keeps them).
    """
    mqs = sorted(set(mq_all), key=_mq_sort_key)
    cids = sorted(cid_all, key=java_string_compare_key)
    return mqs, cids


def _check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    # AbstractAllocateMessageQueueStrategy.check(): same messages (IllegalArgumentException in
    # Java). A client missing from cid_all owns nothing (Java logs "[BUG]" and returns empty).
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    return current_cid in cid_all


# --------------------------------------------------------------------------------------------
# Strategies


class AllocateAveragely:
    """``AllocateMessageQueueAveragely`` ("AVG"): contiguous blocks, the first ``len % n`` one larger.

    10 queues over 3 clients: 4 / 3 / 3. With more clients than queues, the last ones get none.
    """

    __slots__ = ()
    name = "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The block of ``mq_all`` owned by ``current_cid``; see the class docstring."""
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)  # Java indexOf: the first occurrence
        n_mq, n_cid = len(mq_all), len(cid_all)
        mod = n_mq % n_cid
        bigger = mod > 0 and index < mod
        size = 1 if n_mq <= n_cid else n_mq // n_cid + (1 if bigger else 0)
        start = index * size if bigger else index * size + mod
        count = min(size, n_mq - start)  # may be negative: nothing
        return [mq_all[start + i] for i in range(count)]

    def __repr__(self) -> str:
        return "AllocateAveragely()"


class AllocateAveragelyByCircle:
    """``AllocateMessageQueueAveragelyByCircle`` ("AVG_BY_CIRCLE"): round robin by index."""

    __slots__ = ()
    name = "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Queues ``i`` of ``mq_all`` with ``i % len(cid_all)`` equal to this client's index."""
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return [mq_all[i] for i in range(index, len(mq_all), len(cid_all))]

    def __repr__(self) -> str:
        return "AllocateAveragelyByCircle()"


class ConsistentHashRing:
    """``ConsistentHashRouter`` over client ids: a sorted ring of virtual nodes.

    Node ``n`` gets virtual nodes keyed ``f"{n}-{i}"``; a key is routed to the first virtual node
    whose hash is ``>=`` the key's hash, wrapping to the smallest. As in Java's ``TreeMap``, a
    hash collision lets the later virtual node replace the earlier one, and a node added twice
    continues its replica numbering from the virtual nodes it still holds.
    """

    __slots__ = ("_hash_function", "_hashes", "_owners")

    def __init__(
        self,
        nodes: Iterable[str],
        virtual_node_count: int,
        hash_function: Callable[[str], int] = java_md5_hash,
    ) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtual node counts :{virtual_node_count}")
        self._hash_function = hash_function
        ring: dict[int, str] = {}
        replicas: dict[str, int] = {}  # virtual nodes on the ring per node (getExistingReplicas)
        for node in nodes:
            existing = replicas.get(node, 0)
            for i in range(virtual_node_count):
                h = _to_java_long(hash_function(f"{node}-{i + existing}"))
                previous = ring.get(h)
                if previous is not None:
                    replicas[previous] -= 1
                ring[h] = node
                replicas[node] = replicas.get(node, 0) + 1
        self._hashes = sorted(ring)
        self._owners = [ring[h] for h in self._hashes]

    def points(self) -> list[tuple[int, str]]:
        """The ring as ``(hash, node)`` pairs in ring order."""
        return list(zip(self._hashes, self._owners, strict=True))

    def route(self, key: str) -> str | None:
        """The node owning ``key`` (``routeNode``), or ``None`` when the ring is empty."""
        if not self._hashes:
            return None
        pos = bisect_left(self._hashes, _to_java_long(self._hash_function(key)))
        return self._owners[pos if pos < len(self._owners) else 0]


class AllocateConsistentHash:
    """``AllocateMessageQueueConsistentHash`` ("CONSISTENT_HASH").

    Each queue goes to the ring node of ``str(mq)`` (Java's ``MessageQueue.toString()``). The
    default hash is :func:`java_md5_hash`; ``hash_function`` replaces it like Java's custom
    ``HashFunction`` (its result is taken modulo 2**64 as a signed long). With 0 virtual nodes
    nobody owns anything, as in Java.
    """

    __slots__ = ("_hash_function", "_virtual_node_count")
    name = "CONSISTENT_HASH"

    def __init__(
        self, virtual_node_count: int = 10, hash_function: Callable[[str], int] | None = None
    ) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_node_count}")
        self._virtual_node_count = virtual_node_count
        self._hash_function = hash_function

    @property
    def virtual_node_count(self) -> int:
        """Virtual nodes per client on the ring."""
        return self._virtual_node_count

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues of ``mq_all`` whose ring node is ``current_cid``."""
        if not _check(current_cid, mq_all, cid_all):
            return []
        ring = ConsistentHashRing(cid_all, self._virtual_node_count, self._hash_function or java_md5_hash)
        return [mq for mq in mq_all if ring.route(str(mq)) == current_cid]

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_node_count={self._virtual_node_count})"


class AllocateByConfig:
    """``AllocateMessageQueueByConfig`` ("CONFIG"): always the configured queues.

    Like Java, no input is checked: the configured list is returned whatever the arguments.
    """

    __slots__ = ("_message_queues",)
    name = "CONFIG"

    def __init__(self, message_queues: Sequence[MessageQueue]) -> None:
        self._message_queues = tuple(message_queues)

    @property
    def message_queues(self) -> tuple[MessageQueue, ...]:
        """The configured queues, in configuration order."""
        return self._message_queues

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """A copy of the configured queues (arguments ignored)."""
        return list(self._message_queues)

    def __repr__(self) -> str:
        return f"AllocateByConfig({list(self._message_queues)!r})"


def _java_split_at(s: str) -> list[str]:
    # Java String.split("@"): like Python's split, minus trailing empty strings (a string with
    # no '@' at all stays one element, but only a length of 2 matters to the caller).
    parts = s.split("@")
    while parts and not parts[-1]:
        parts.pop()
    return parts


class AllocateByMachineRoom:
    """``AllocateMessageQueueByMachineRoom`` ("MACHINE_ROOM").

    Only queues of brokers named ``"<idc>@<name>"`` with ``idc`` in ``consumer_idcs`` are
    shared out: ``len // n`` contiguous ones per client, then the remainder one each to the first
    clients, taken from the tail.
    """

    __slots__ = ("_consumer_idcs",)
    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Collection[str]) -> None:
        self._consumer_idcs = frozenset(consumer_idcs)

    @property
    def consumer_idcs(self) -> frozenset[str]:
        """The machine rooms whose brokers' queues are consumed."""
        return self._consumer_idcs

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """This client's share of the queues in the configured rooms."""
        if not _check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        eligible = []
        for mq in mq_all:
            parts = _java_split_at(mq.broker_name)
            if len(parts) == 2 and parts[0] in self._consumer_idcs:
                eligible.append(mq)
        n_cid = len(cid_all)
        per, rem = divmod(len(eligible), n_cid)
        result = eligible[per * index : per * index + per]
        if rem > index:
            result.append(eligible[index + per * n_cid])
        return result

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom({sorted(self._consumer_idcs)!r})"


class AllocateMachineRoomNearby:
    """``AllocateMachineRoomNearby`` ("MACHINE_ROOM_NEARBY-<inner name>").

    Queues of a room that has live consumers go only to those consumers (allocated by ``strategy``
    among them); queues of a room without consumers are shared by every consumer. Rooms are
    visited in Java string order, as Java's ``TreeMap`` does.
    """

    __slots__ = ("_resolver", "_strategy", "name")

    def __init__(self, strategy: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        if strategy is None:
            raise TypeError("allocateMessageQueueStrategy is null")
        if resolver is None:
            raise TypeError("machineRoomResolver is null")
        self._strategy = strategy
        self._resolver = resolver
        self.name = f"MACHINE_ROOM_NEARBY-{strategy.name}"

    @property
    def strategy(self) -> AllocateStrategy:
        """The strategy used inside each group of queues."""
        return self._strategy

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Queues of this client's room, then its share of the queues of rooms without consumers."""
        if not _check(current_cid, mq_all, cid_all):
            return []
        room_mqs: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self._resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"Machine room is null for mq {mq}")
            room_mqs.setdefault(room, []).append(mq)
        room_cids: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self._resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"Machine room is null for consumer id {cid}")
            room_cids.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        current_room = self._resolver.consumer_deploy_in(current_cid)
        local = room_mqs.pop(current_room, None)
        if local:
            result += self._strategy.allocate(
                consumer_group, current_cid, local, room_cids.get(current_room, [])
            )
        for room in sorted(room_mqs, key=java_string_compare_key):
            if room not in room_cids:  # nobody lives there: everybody shares its queues
                result += self._strategy.allocate(consumer_group, current_cid, room_mqs[room], cid_all)
        return result

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby({self._strategy!r}, {self._resolver!r})"


# --------------------------------------------------------------------------------------------
# Lookup by name


def _nearby(**kwargs: Any) -> AllocateMachineRoomNearby:
    inner = kwargs.pop("strategy", None)
    resolver = kwargs.pop("resolver", None)
    if isinstance(inner, str):
        inner = strategy_by_name(inner, **kwargs)
    elif kwargs:
        raise TypeError(f"unexpected arguments {sorted(kwargs)}")
    if inner is None or resolver is None:
        raise TypeError("needs strategy= (a strategy or its name) and resolver=")
    return AllocateMachineRoomNearby(inner, resolver)


_FACTORIES: dict[str, Callable[..., AllocateStrategy]] = {
    "AVG": AllocateAveragely,
    "AVG_BY_CIRCLE": AllocateAveragelyByCircle,
    "CONSISTENT_HASH": AllocateConsistentHash,
    "CONFIG": AllocateByConfig,
    "MACHINE_ROOM": AllocateByMachineRoom,
    "MACHINE_ROOM_NEARBY": _nearby,
}


def strategy_by_name(name: str, **kwargs: Any) -> AllocateStrategy:
    """Build a strategy from its Java ``getName()`` value or a friendly alias.

    Accepted (case-insensitive, ``-`` and ``_`` alike): "AVG" / "averagely", "AVG_BY_CIRCLE" /
    "circle", "CONSISTENT_HASH" (kwargs ``virtual_node_count``, ``hash_function``), "CONFIG"
    (``message_queues``), "MACHINE_ROOM" (``consumer_idcs``), "MACHINE_ROOM_NEARBY"
    (``strategy`` = a strategy or a name, ``resolver``) and "MACHINE_ROOM_NEARBY-<inner name>"
    (``resolver``, other kwargs go to the inner strategy); also the Java class names.
    Raises ``ConfigError`` for an unknown name or arguments the strategy does not take.
    """
    canonical, inner = canonical_strategy(name)
    if inner is not None:
        kwargs["strategy"] = inner
    try:
        return _FACTORIES[canonical](**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"allocation strategy {canonical}: {exc}") from exc
