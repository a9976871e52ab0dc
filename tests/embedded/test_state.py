"""BrokerState: built-in topics, offsets, groups, the data version and the JSON files of store/config."""

from __future__ import annotations

import json
from pathlib import Path

from rmq_async.embedded.state import SCHEDULE_TOPIC, TBW102, BrokerState, TopicConfig


def state(data_dir: Path | None = None, *, auto_create: bool = True) -> BrokerState:
    return BrokerState(
        "broker-a",
        "DefaultCluster",
        default_queues=4,
        auto_create=auto_create,
        schedule_queues=18,
        data_dir=data_dir,
    )


def test_built_in_topics() -> None:
    s = state()
    assert s.topics[TBW102].to_json()["perm"] == 7 and s.topics[TBW102].write == 4
    assert s.topics[SCHEDULE_TOPIC].read == 18
    assert {"broker-a", "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "SELF_TEST_TOPIC"} <= set(s.topics)
    assert TBW102 not in state(auto_create=False).topics
    assert TBW102 in state(auto_create=False).system_topics


def test_offsets_groups_and_data_version() -> None:
    s = state()
    assert s.query_offset("g", "T", 0) == -1
    s.commit_offset("g", "T", 0, 7)
    assert (s.query_offset("g", "T", 0), s.query_offset("g", "T", 1), s.dirty) == (7, -1, True)
    before = s.data_version()["counter"]
    s.put_topic(TopicConfig("New", 2, 2))
    assert s.data_version()["counter"] == before + 1
    assert s.wrapper_json()["topicConfigTable"]["New"]["writeQueueNums"] == 2
    s.add_group("g")
    assert s.groups == {"g"}


def test_topic_config_string_as_java() -> None:
    assert str(TopicConfig("T", 4, 4, 6)) == (
        "TopicConfig [topicName=T, readQueueNums=4, writeQueueNums=4, perm=RW-, topicFilterType=SINGLE_TAG, "
        "topicSysFlag=0, order=false]"
    )
    tc = TopicConfig("T", 1, 2, 4, 3, True)
    assert TopicConfig.from_json(tc.to_json()) == tc


def test_persist_and_reload(tmp_path: Path) -> None:
    s = state(tmp_path)
    s.persist()
    assert not (tmp_path / "config").exists()  # nothing changed
    s.put_topic(TopicConfig("Kept", 3, 3))
    s.commit_offset("g", "Kept", 2, 11)
    s.add_group("g")
    s.persist()
    offsets = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert offsets == {"offsetTable": {"Kept@g": {"2": 11}}}
    again = state(tmp_path)
    assert again.topics["Kept"].read == 3 and again.query_offset("g", "Kept", 2) == 11
    assert again.groups == {"g"} and again.counter == s.counter
    assert not again.dirty
