"""Allocation strategies: hand-derived tables from the Java source, Java hashing and ordering, properties.

Every expected table below was derived by hand from the Java source (rocketmq-all-4.9.8 /
5.3.3, client/.../consumer/rebalance/*.java); the derivation is in the comments. The tables were
also checked against the real Java classes compiled from the 5.3.3 sources (outside this suite).
"""

from __future__ import annotations

import functools
import hashlib
import random
import struct
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_async.consumer.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    ConsistentHashRing,
    java_md5_hash,
    java_string_compare_key,
    sort_for_allocation,
    strategy_by_name,
)
from rmq_async.errors import ConfigError
from rmq_async.protocol.mq import MessageQueue

MQ = MessageQueue


def queues(n: int, topic: str = "T", broker: str = "b") -> list[MessageQueue]:
    return [MQ(topic, broker, i) for i in range(n)]


def table(strategy: AllocateStrategy, mqs: Sequence[MessageQueue], cids: Sequence[str]) -> list[list[int]]:
    """Per client (in cid order), the indexes into ``mqs`` of its queues, in returned order."""
    return [[mqs.index(mq) for mq in strategy.allocate("G", cid, mqs, cids)] for cid in cids]


CIDS3 = ["c1", "c2", "c3"]


# ---------------------------------------------------------------------------------------------
# The seeds' worked examples (CONSUMER.md section 2, seed 002)


def test_seed_example_ten_queues_three_clients_averagely_is_4_3_3_contiguous() -> None:
    assert table(AllocateAveragely(), queues(10), CIDS3) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_seed_example_eight_queues_three_clients() -> None:
    # seed 002: averagely c1: q1-q3, c2: q4-q6, c3: q7, q8; by circle c1: q1 q4 q7, c2: q2 q5 q8, c3: q3 q6
    assert table(AllocateAveragely(), queues(8), CIDS3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert table(AllocateAveragelyByCircle(), queues(8), CIDS3) == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_ten_queues_three_clients_by_circle_is_round_robin() -> None:
    assert table(AllocateAveragelyByCircle(), queues(10), CIDS3) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


# ---------------------------------------------------------------------------------------------
# Averagely. Java: mod = n_mq % n_cid; size = 1 if n_mq <= n_cid else n_mq // n_cid (+1 if
# mod > 0 and index < mod); start = index * size if (mod > 0 and index < mod) else
# index * size + mod; count = min(size, n_mq - start), nothing when <= 0.

AVERAGELY_TABLE = [
    # 10 / 3: mod 1. i0: size 4, start 0. i1: size 3, start 3+1=4. i2: size 3, start 6+1=7.
    (10, 3, [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]),
    # 8 / 3: mod 2. i0: size 3, start 0. i1: 1<2 so size 3, start 3. i2: size 2, start 4+2=6.
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    # 7 / 2: mod 1. i0: size 4, start 0. i1: size 3, start 3+1=4.
    (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    # 5 / 4: mod 1. i0: size 2, start 0. i1..3: size 1, start i+1.
    (5, 4, [[0, 1], [2], [3], [4]]),
    # 3 / 3: mod 0, size 1 (n_mq <= n_cid), start = i.
    (3, 3, [[0], [1], [2]]),
    # 2 / 3 (more clients): mod 2, size 1. i0: start 0. i1: 1<2, start 1. i2: start 2+2=4,
    # count = min(1, 2-4) = -2: nothing.
    (2, 3, [[0], [1], []]),
    # 1 / 4: mod 1, size 1. i0: start 0. i1: start 1+1=2, count min(1, -1): nothing; same for i2, i3.
    (1, 4, [[0], [], [], []]),
    # 6 / 1: mod 0, size 6, start 0.
    (6, 1, [[0, 1, 2, 3, 4, 5]]),
    # 9 / 3: mod 0, size 3, start 3i.
    (9, 3, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
]


@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), AVERAGELY_TABLE)
def test_averagely_table(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    cids = [f"c{i}" for i in range(n_cid)]
    assert table(AllocateAveragely(), queues(n_mq), cids) == expected


# Circle. Java: for i in index .. n_mq-1, take i when i % n_cid == index.
CIRCLE_TABLE = [
    (10, 3, [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]),
    (7, 2, [[0, 2, 4, 6], [1, 3, 5]]),
    (5, 4, [[0, 4], [1], [2], [3]]),
    # more clients than queues: i2 starts at 2 >= n_mq: nothing.
    (2, 3, [[0], [1], []]),
    (1, 4, [[0], [], [], []]),
    (6, 1, [[0, 1, 2, 3, 4, 5]]),
]


@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), CIRCLE_TABLE)
def test_circle_table(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    cids = [f"c{i}" for i in range(n_cid)]
    assert table(AllocateAveragelyByCircle(), queues(n_mq), cids) == expected


def test_multiple_brokers_and_topics_are_allocated_in_java_sort_order() -> None:
    given_mqs = [
        MQ("TopicB", "broker-a", 0),
        MQ("TopicA", "broker-b", 1),
        MQ("TopicA", "broker-a", 1),
        MQ("TopicA", "broker-b", 0),
        MQ("TopicA", "broker-a", 0),
        MQ("TopicA", "broker-a", 0),
    ]
    # Client ids sort as strings: "10.0.0.10@1" < "10.0.0.2@1" (the '1' of "10" < '2').
    mqs, cids = sort_for_allocation(given_mqs, ["10.0.0.2@1", "10.0.0.10@1"])
    # The set drops the duplicate; sorted by topic, broker name, queue id.
    assert mqs == [
        MQ("TopicA", "broker-a", 0),
        MQ("TopicA", "broker-a", 1),
        MQ("TopicA", "broker-b", 0),
        MQ("TopicA", "broker-b", 1),
        MQ("TopicB", "broker-a", 0),
    ]
    assert cids == ["10.0.0.10@1", "10.0.0.2@1"]
    # Averagely 5 / 2: mod 1. "10.0.0.10@1" (i0): size 3, start 0. "10.0.0.2@1" (i1): size 2, start 3.
    assert table(AllocateAveragely(), mqs, cids) == [[0, 1, 2], [3, 4]]
    # By circle: i0 takes 0, 2, 4; i1 takes 1, 3.
    assert table(AllocateAveragelyByCircle(), mqs, cids) == [[0, 2, 4], [1, 3]]


def test_duplicate_client_ids_behave_like_java_index_of() -> None:
    # cidAll ["a", "a", "b"], 6 queues: Java's indexOf gives "a" index 0 (size 2, start 0) and "b"
    # index 2 (start 4): queues 2 and 3 (the second "a" slot) are owned by nobody, as in Java.
    cids = ["a", "a", "b"]
    assert [
        [q.queue_id for q in AllocateAveragely().allocate("G", c, queues(6), cids)] for c in ("a", "b")
    ] == [
        [0, 1],
        [4, 5],
    ]


# ---------------------------------------------------------------------------------------------
# Java hashing: ConsistentHashRouter.MD5Hash


def java_md5_spec(key: str) -> int:
    """MD5Hash.hash written out from the Java: h <<= 8; h |= ((int) digest[i]) & 0xFF for i < 4."""
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    signed = struct.unpack("4b", digest[:4])  # Java bytes are signed
    h = 0
    for b in signed:
        h <<= 8
        h |= b & 0xFF
    return h


# Values printed by the Java MD5Hash (run on the 5.3.3 classes) for these keys.
JAVA_MD5_VALUES = {
    "a": 214005177,
    "c1-0": 3886541579,
    "c1-1": 1895315590,
    "c2-0": 830676049,
    "c2-1": 198527331,
    "MessageQueue [topic=T, brokerName=b, queueId=0]": 562732085,
    "消费者A-0": 3908028106,
    "café-1": 1028527577,
    "\U0001f600": 704834243,
}


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MD5_VALUES.items()))
def test_java_md5_hash_known_values(key: str, expected: int) -> None:
    assert java_md5_hash(key) == expected == java_md5_spec(key)


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40))
def test_java_md5_hash_matches_the_spec(key: str) -> None:
    h = java_md5_hash(key)
    assert h == java_md5_spec(key)
    assert 0 <= h < 2**32


def test_java_md5_hash_of_surrogates_follows_java_string_get_bytes() -> None:
    # A pair split into two Python code points is one Java character: 4 UTF-8 bytes.
    assert java_md5_hash("\ud83d\ude00") == java_md5_hash("\U0001f600") == 704834243
    # A lone surrogate is encoded by Java as '?'.
    assert java_md5_hash("x\ud800y") == java_md5_hash("x?y")


# ---------------------------------------------------------------------------------------------
# Consistent hash. Virtual node keys are ClientNode.getKey() + "-" + replica index; the queue
# key is MessageQueue.toString(); routeNode takes the first ring key >= hash(key), else wraps to
# the first key (TreeMap.tailMap / firstKey).


def test_consistent_hash_small_ring_by_hand() -> None:
    # Ring for ["c1", "c2"], 2 virtual nodes (hashes in JAVA_MD5_VALUES):
    #   198527331 c2-1 | 830676049 c2-0 | 1895315590 c1-1 | 3886541579 c1-0
    ring = ConsistentHashRing(["c1", "c2"], 2)
    assert ring.points() == [(198527331, "c2"), (830676049, "c2"), (1895315590, "c1"), (3886541579, "c1")]
    # "MessageQueue [topic=T, brokerName=b, queueId=q]":
    #   q0 562732085  -> next >= is 830676049 (c2-0)   -> c2
    #   q1 3803073317 -> 3886541579 (c1-0)             -> c1
    #   q2 1979679239 -> 3886541579 (c1-0)             -> c1
    #   q3 434191955  -> 830676049 (c2-0)              -> c2
    #   q4 4287528942 -> beyond the last key: wrap to 198527331 (c2-1) -> c2
    mqs = queues(5)
    assert [java_md5_hash(str(mq)) for mq in mqs] == [
        562732085,
        3803073317,
        1979679239,
        434191955,
        4287528942,
    ]
    assert [ring.route(str(mq)) for mq in mqs] == ["c2", "c1", "c1", "c2", "c2"]
    strategy = AllocateConsistentHash(2)
    assert table(strategy, mqs, ["c1", "c2"]) == [[1, 2], [0, 3, 4]]


def test_consistent_hash_non_ascii_client_ids_by_hand() -> None:
    # UTF-8 bytes are hashed. Ring for ["café", "消费者A", "😀"] (Java order), 2 virtual nodes:
    #   1028527577 café-1 | 1552967531 😀-0 | 2629619488 消费者A-1 | 3148222057 😀-1
    #   3908028106 消费者A-0 | 4275856239 café-0
    cids = ["café", "消费者A", "\U0001f600"]
    ring = ConsistentHashRing(cids, 2)
    assert ring.points() == [
        (1028527577, "café"),
        (1552967531, "\U0001f600"),
        (2629619488, "消费者A"),
        (3148222057, "\U0001f600"),
        (3908028106, "消费者A"),
        (4275856239, "café"),
    ]
    # "MessageQueue [topic=主题, brokerName=b, queueId=q]" hashes and owners:
    #   q0 2316248910 -> 2629619488 消费者A | q1 1850833880 -> 2629619488 消费者A
    #   q2 2613822446 -> 2629619488 消费者A | q3 3967220779 -> 4275856239 café
    #   q4 1639741110 -> 2629619488 消费者A | q5 633797358  -> 1028527577 café
    #   q6 3241557970 -> 3908028106 消费者A | q7 3319549172 -> 3908028106 消费者A
    mqs = queues(8, topic="主题")
    assert [java_md5_hash(str(mq)) for mq in mqs] == [
        2316248910,
        1850833880,
        2613822446,
        3967220779,
        1639741110,
        633797358,
        3241557970,
        3319549172,
    ]
    assert table(AllocateConsistentHash(2), mqs, cids) == [[3, 5], [0, 1, 2, 4, 6, 7], []]


def test_consistent_hash_default_ten_virtual_nodes_two_topics_two_brokers() -> None:
    # 30 ring points: computed with the rules above and checked against the Java classes.
    mqs, cids = sort_for_allocation(
        [MQ(t, b, q) for t in ("TopicA", "TopicB") for b in ("broker-a", "broker-b") for q in range(2)],
        ["10.0.0.3@1", "10.0.0.1@1", "10.0.0.2@1"],
    )
    assert [str(mq) for mq in mqs][:2] == [
        "MessageQueue [topic=TopicA, brokerName=broker-a, queueId=0]",
        "MessageQueue [topic=TopicA, brokerName=broker-a, queueId=1]",
    ]
    # mqs: 0 A/a/0, 1 A/a/1, 2 A/b/0, 3 A/b/1, 4 B/a/0, 5 B/a/1, 6 B/b/0, 7 B/b/1
    assert table(AllocateConsistentHash(), mqs, cids) == [[2, 5, 6], [1], [0, 3, 4, 7]]


def test_consistent_hash_zero_virtual_nodes_allocates_nothing() -> None:
    # An empty ring: routeNode returns null, so nobody gets anything (as in Java).
    assert table(AllocateConsistentHash(0), queues(3), CIDS3) == [[], [], []]
    assert ConsistentHashRing(CIDS3, 0).route("x") is None


def test_consistent_hash_ring_duplicates_and_collisions_follow_treemap() -> None:
    # A node listed twice continues its replica numbering (getExistingReplicas).
    assert {h for h, _ in ConsistentHashRing(["a", "a"], 2).points()} == {
        java_md5_hash(f"a-{i}") for i in range(4)
    }
    # With every key colliding, TreeMap.put replaces: the last virtual node wins, and a node whose
    # virtual nodes were all replaced restarts at replica 0.
    asked: list[str] = []

    def constant(key: str) -> int:
        asked.append(key)
        return 5

    ring = ConsistentHashRing(["x", "y", "x"], 2, constant)
    assert asked == ["x-0", "x-1", "y-0", "y-1", "x-0", "x-1"]
    assert ring.points() == [(5, "x")]


def test_consistent_hash_custom_hash_function_is_a_java_long() -> None:
    # Values wrap to a signed 64-bit long; the ring is ordered as signed longs.
    hashes = {"n1-0": 2**64 - 10, "n2-0": 3, "k": -5, "big": 2**63 - 1, "at": 2**64 - 10}
    ring = ConsistentHashRing(["n1", "n2"], 1, hashes.__getitem__)
    assert ring.points() == [(-10, "n1"), (3, "n2")]
    assert ring.route("k") == "n2"  # -5 -> first key >= -5 is 3
    assert ring.route("at") == "n1"  # -10 -> tailMap(-10) includes -10 itself
    assert ring.route("big") == "n1"  # beyond the last key: wrap
    strategy = AllocateConsistentHash(1, hash_function=lambda key: 0 if key.endswith("-0") else 1)
    # Every client's virtual node lands on 0: the last one ("c3") wins; every queue hashes to 1 > 0
    # and wraps to it.
    assert table(strategy, queues(3), CIDS3) == [[], [], [0, 1, 2]]


# ---------------------------------------------------------------------------------------------
# By config, by machine room, machine room nearby


def test_by_config_returns_the_configured_queues_without_any_check() -> None:
    configured = [MQ("T", "b", 3), MQ("T", "a", 1)]
    strategy = AllocateByConfig(configured)
    assert strategy.name == "CONFIG"
    assert strategy.allocate("G", "c1", queues(2), ["c1"]) == configured
    # Java's allocate() does not call check(): even empty inputs return the configured list.
    assert strategy.allocate("G", "", [], []) == configured
    result = strategy.allocate("G", "c1", [], [])
    result.append(MQ("x", "y", 0))
    assert strategy.allocate("G", "c1", [], []) == configured  # a copy each time


def test_by_machine_room_java_example() -> None:
    # AllocateMessageQueueByMachineRoomTest: queues 0-4 on "room1@broker-a", 5-9 on
    # "room2@broker-b", consumer idcs {"room1"}, 2 clients. Eligible: q0..q4 (5); per = 5 // 2 = 2,
    # rem = 1. Client 0: q0, q1 (start 0) and, since rem 1 > 0, eligible[0 + 2*2] = q4.
    # Client 1: q2, q3 (start 2); rem 1 > 1 is false.
    mqs = [MQ("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)]
    cids = ["CID_PREFIX0", "CID_PREFIX1"]
    assert table(AllocateByMachineRoom({"room1"}), mqs, cids) == [[0, 1, 4], [2, 3]]


def test_by_machine_room_three_clients_seven_queues() -> None:
    # 7 eligible, 3 clients: per 2, rem 1. c0: e0 e1 + e6; c1: e2 e3; c2: e4 e5.
    mqs = queues(7, broker="idc1@b")
    assert table(AllocateByMachineRoom(["idc1"]), mqs, CIDS3) == [[0, 1, 6], [2, 3], [4, 5]]
    # More clients than eligible queues: per 0, rem 2: c0 gets e0, c1 gets e1, c2 nothing.
    assert table(AllocateByMachineRoom(["idc1"]), mqs[:2], CIDS3) == [[0], [1], []]


def test_by_machine_room_uses_java_split_semantics() -> None:
    # Java "x".split("@") drops trailing empty strings and keeps leading ones:
    #   "room1@"    -> ["room1"]          length 1: out
    #   "room1@x@"  -> ["room1", "x"]     length 2: in
    #   "room1@a@b" -> 3 parts: out;  "room1" -> 1 part: out
    #   "@x"        -> ["", "x"]          in only when "" is a consumer idc
    #   "room1@b"   -> in;  "room2@b" -> idc not configured: out
    brokers = ["room1@", "room1@x@", "room1@a@b", "room1", "@x", "room1@b", "room2@b"]
    mqs = [MQ("T", b, 0) for b in brokers]
    assert AllocateByMachineRoom({"room1"}).allocate("G", "c", mqs, ["c"]) == [mqs[1], mqs[5]]
    assert AllocateByMachineRoom({"room1", ""}).allocate("G", "c", mqs, ["c"]) == [mqs[1], mqs[4], mqs[5]]


class DashResolver:
    """The resolver of Java's AllocateMachineRoomNearByTest: the text before the first '-'."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-")[0]


def test_machine_room_nearby_by_hand() -> None:
    # Brokers in rooms bj (3 queues), hz (4), sh (2); consumers in hz (2) and sh (1).
    mqs, cids = sort_for_allocation(
        queues(4, broker="hz-b") + queues(2, broker="sh-b") + queues(3, broker="bj-b"),
        ["sh-c1", "hz-c2", "hz-c1"],
    )
    # mqs: 0-2 bj0..bj2, 3-6 hz0..hz3, 7-8 sh0..sh1; cids: hz-c1, hz-c2, sh-c1.
    assert cids == ["hz-c1", "hz-c2", "sh-c1"]
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), DashResolver())
    assert strategy.name == "MACHINE_ROOM_NEARBY-AVG"
    # hz-c1: own room hz, AVG of hz0..3 over [hz-c1, hz-c2] -> hz0 hz1; then rooms without
    # consumers in TreeMap order (only bj): AVG of bj0..2 over all 3 clients, index 0 -> bj0.
    # hz-c2: hz2 hz3, then bj1. sh-c1: sh0 sh1 (alone in sh), then bj2 (index 2).
    assert table(strategy, mqs, cids) == [[3, 4, 0], [5, 6, 1], [7, 8, 2]]


def test_machine_room_nearby_visits_rooms_in_java_string_order() -> None:
    # Two rooms without consumers: "\U00010000" (UTF-16 D800 DC00) sorts BEFORE "\uffff" in Java
    # (a TreeMap of Strings), after it in Python. Their queues follow in that order.
    mqs = [MQ("T", "\uffff-b", 0), MQ("T", "\U00010000-b", 0)]
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), DashResolver())
    assert strategy.allocate("G", "home-c", mqs, ["home-c"]) == [mqs[1], mqs[0]]


def test_machine_room_nearby_rejects_empty_rooms() -> None:
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), DashResolver())
    with pytest.raises(
        ValueError, match=r"^Machine room is null for mq MessageQueue \[topic=T, brokerName=-b, "
    ):
        strategy.allocate("G", "r-c", [MQ("T", "-b", 0)], ["r-c"])
    with pytest.raises(ValueError, match=r"^Machine room is null for consumer id -c$"):
        strategy.allocate("G", "r-c", [MQ("T", "r-b", 0)], ["-c", "r-c"])


# ---------------------------------------------------------------------------------------------
# Input validation (AbstractAllocateMessageQueueStrategy.check)

CHECKED: list[AllocateStrategy] = [
    AllocateAveragely(),
    AllocateAveragelyByCircle(),
    AllocateConsistentHash(),
    AllocateByMachineRoom({"r"}),
    AllocateMachineRoomNearby(AllocateAveragely(), DashResolver()),
]


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_check_messages_and_unknown_client(strategy: AllocateStrategy) -> None:
    mqs, cids = [MQ("T", "r@b-x", 0)], ["r-c"]
    with pytest.raises(ValueError, match=r"^currentCID is empty$"):
        strategy.allocate("G", "", mqs, cids)
    with pytest.raises(ValueError, match=r"^mqAll is null or mqAll empty$"):
        strategy.allocate("G", "r-c", [], cids)
    with pytest.raises(ValueError, match=r"^cidAll is null or cidAll empty$"):
        strategy.allocate("G", "r-c", mqs, [])
    assert strategy.allocate("G", "r-other", mqs, cids) == []  # not a member: nothing
    assert strategy.allocate("G", "r-c", mqs, cids) == mqs


def test_constructor_argument_checks() -> None:
    with pytest.raises(ValueError, match=r"^illegal virtualNodeCnt :-1$"):
        AllocateConsistentHash(-1)
    with pytest.raises(ValueError, match=r"^illegal virtual node counts :-2$"):
        ConsistentHashRing(["a"], -2)


# ---------------------------------------------------------------------------------------------
# Java string order and the RebalanceImpl sort


def java_compare(a: str, b: str) -> int:
    """String.compareTo written out: UTF-16 code units one by one, then the length difference."""

    def units(s: str) -> list[int]:
        out: list[int] = []
        for ch in s:
            cp = ord(ch)
            if cp > 0xFFFF:
                out += [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
            else:
                out.append(cp)
        return out

    ua, ub = units(a), units(b)
    for x, y in zip(ua, ub, strict=False):
        if x != y:
            return x - y
    return len(ua) - len(ub)


def test_java_string_order_differs_from_python_beyond_the_bmp() -> None:
    items = ["\uffff", "\U00010000", "\ue000", "z", "", "za", "\U0001f600"]
    assert sorted(items, key=java_string_compare_key) == [
        "",
        "z",
        "za",
        "\U00010000",
        "\U0001f600",
        "\ue000",
        "\uffff",
    ]
    assert sorted(items) != sorted(items, key=java_string_compare_key)  # why the key exists


text_units = st.text(
    alphabet=st.sampled_from(["a", "b", "é", "消", "\ue000", "\uffff", "\U00010000", "\U0001f600"]),
    max_size=6,
)


@given(st.lists(text_units, max_size=12))
def test_java_string_compare_key_orders_like_string_compare_to(items: list[str]) -> None:
    assert sorted(items, key=java_string_compare_key) == sorted(items, key=functools.cmp_to_key(java_compare))


def test_sort_for_allocation_uses_java_order_for_topics_brokers_and_clients() -> None:
    mqs, cids = sort_for_allocation(
        [
            MQ("\uffff", "b", 0),
            MQ("\U00010000", "b", 1),
            MQ("t", "\uffff", 0),
            MQ("t", "\U00010000", 0),
            MQ("t", "a", 10),
            MQ("t", "a", 9),
        ],
        ("\uffff@1", "\U00010000@1", "a@1"),
    )
    assert mqs == [
        MQ("t", "a", 9),
        MQ("t", "a", 10),
        MQ("t", "\U00010000", 0),
        MQ("t", "\uffff", 0),
        MQ("\U00010000", "b", 1),
        MQ("\uffff", "b", 0),
    ]
    assert cids == ["a@1", "\U00010000@1", "\uffff@1"]


# ---------------------------------------------------------------------------------------------
# Properties of the strategies that share every queue out

names = st.text(
    alphabet=st.sampled_from(["a", "B", "-", "@", "é", "消", "\uffff", "\U0001f600"]), min_size=1, max_size=4
)
queue_lists = st.lists(st.builds(MessageQueue, names, names, st.integers(0, 40)), min_size=1, max_size=40)
client_lists = st.lists(names, min_size=1, max_size=12, unique=True)
sharing = st.one_of(
    st.just(AllocateAveragely()),
    st.just(AllocateAveragelyByCircle()),
    st.integers(1, 12).map(AllocateConsistentHash),
)


@settings(max_examples=150, deadline=None)
@given(sharing, queue_lists, client_lists, st.randoms(use_true_random=False))
def test_every_queue_has_exactly_one_owner_whatever_the_input_order(
    strategy: AllocateStrategy, mq_in: list[MessageQueue], cid_in: list[str], rnd: random.Random
) -> None:
    mqs, cids = sort_for_allocation(mq_in, cid_in)
    shares = {cid: strategy.allocate("G", cid, mqs, cids) for cid in cids}
    owned = [mq for share in shares.values() for mq in share]
    assert len(owned) == len(set(owned)) == len(mqs)  # disjoint, and no queue is lost
    assert set(owned) == set(mq_in)
    # Deterministic, and the same after the inputs arrive in another order.
    rnd.shuffle(mq_in)
    rnd.shuffle(cid_in)
    mqs2, cids2 = sort_for_allocation(mq_in, cid_in)
    assert (mqs2, cids2) == (mqs, cids)
    assert {cid: strategy.allocate("G", cid, mqs2, cids2) for cid in cids2} == shares


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), queue_lists, client_lists.filter(lambda c: len(c) > 1), st.data())
def test_consistent_hash_moves_only_the_departed_clients_queues(
    vnodes: int, mq_in: list[MessageQueue], cid_in: list[str], data: st.DataObject
) -> None:
    strategy = AllocateConsistentHash(vnodes)
    mqs, cids = sort_for_allocation(mq_in, cid_in)
    before = {mq: cid for cid in cids for mq in strategy.allocate("G", cid, mqs, cids)}
    gone = data.draw(st.sampled_from(cids))
    rest = [c for c in cids if c != gone]
    after = {mq: cid for cid in rest for mq in strategy.allocate("G", cid, mqs, rest)}
    assert set(after) == set(mqs)
    assert all(after[mq] == owner for mq, owner in before.items() if owner != gone)


# ---------------------------------------------------------------------------------------------
# strategy_by_name


@pytest.mark.parametrize(
    ("name", "kwargs", "cls", "java_name"),
    [
        ("AVG", {}, AllocateAveragely, "AVG"),
        ("averagely", {}, AllocateAveragely, "AVG"),
        ("AllocateMessageQueueAveragely", {}, AllocateAveragely, "AVG"),
        ("AVG_BY_CIRCLE", {}, AllocateAveragelyByCircle, "AVG_BY_CIRCLE"),
        ("circle", {}, AllocateAveragelyByCircle, "AVG_BY_CIRCLE"),
        ("CONSISTENT_HASH", {}, AllocateConsistentHash, "CONSISTENT_HASH"),
        ("consistent-hash", {"virtual_node_count": 3}, AllocateConsistentHash, "CONSISTENT_HASH"),
        ("CONFIG", {"message_queues": [MQ("T", "b", 0)]}, AllocateByConfig, "CONFIG"),
        ("config", {"message_queues": []}, AllocateByConfig, "CONFIG"),
        ("MACHINE_ROOM", {"consumer_idcs": {"r"}}, AllocateByMachineRoom, "MACHINE_ROOM"),
        ("machine_room", {"consumer_idcs": ["r"]}, AllocateByMachineRoom, "MACHINE_ROOM"),
        (
            "MACHINE_ROOM_NEARBY-AVG",
            {"resolver": DashResolver()},
            AllocateMachineRoomNearby,
            "MACHINE_ROOM_NEARBY-AVG",
        ),
        (
            "machine_room_nearby",
            {"strategy": "circle", "resolver": DashResolver()},
            AllocateMachineRoomNearby,
            "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE",
        ),
        (
            "machine_room_nearby",
            {"strategy": AllocateConsistentHash(), "resolver": DashResolver()},
            AllocateMachineRoomNearby,
            "MACHINE_ROOM_NEARBY-CONSISTENT_HASH",
        ),
    ],
)
def test_strategy_by_name(name: str, kwargs: dict[str, object], cls: type, java_name: str) -> None:
    strategy = strategy_by_name(name, **kwargs)
    assert type(strategy) is cls
    assert strategy.name == java_name
    assert isinstance(strategy, AllocateStrategy)


def test_strategy_by_name_passes_arguments() -> None:
    strategy = strategy_by_name("CONSISTENT_HASH", virtual_node_count=2)
    assert isinstance(strategy, AllocateConsistentHash)
    assert strategy.virtual_node_count == 2
    nearby = strategy_by_name(
        "MACHINE_ROOM_NEARBY-CONSISTENT_HASH", resolver=DashResolver(), virtual_node_count=4
    )
    assert isinstance(nearby, AllocateMachineRoomNearby)
    assert isinstance(nearby.strategy, AllocateConsistentHash)
    assert nearby.strategy.virtual_node_count == 4


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("LEAST_LOADED", {}, "unknown allocation strategy 'LEAST_LOADED'"),
        ("MACHINE_ROOM_NEARBY-NOPE", {"resolver": DashResolver()}, "unknown inner allocation strategy"),
        ("CONFIG", {}, "allocation strategy CONFIG"),
        ("MACHINE_ROOM", {}, "allocation strategy MACHINE_ROOM"),
        ("AVG", {"virtual_node_count": 3}, "allocation strategy AVG"),
        ("CONSISTENT_HASH", {"virtual_node_count": -1}, "illegal virtualNodeCnt :-1"),
        ("MACHINE_ROOM_NEARBY", {"strategy": "AVG"}, "needs strategy"),
    ],
)
def test_strategy_by_name_errors(name: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        strategy_by_name(name, **kwargs)
