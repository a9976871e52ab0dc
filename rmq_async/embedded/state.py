"""The broker's configuration state: topic configs, consumer offsets, subscription groups.

Strategy: plain dicts mirroring ``TopicConfigManager``, ``ConsumerOffsetManager`` and
``SubscriptionGroupManager``, each able to write itself as the JSON file the real broker keeps in
``store/config`` (``topics.json``, ``consumerOffset.json``, ``subscriptionGroup.json``). Files are
written atomically (temp file + rename) by :meth:`BrokerState.persist`, which the broker calls about
once a second when something changed and at shutdown; so a crash loses at most the last second of
offset commits and nothing else that a restart cannot rebuild.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .jcompat import json_body, perm_to_string

__all__ = [
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "TBW102",
    "TIMER_TOPIC",
    "BrokerState",
    "TopicConfig",
    "load_json",
    "save_json",
]

TBW102 = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: ``TimerMessageStore.TIMER_TOPIC`` (5.x): where timer messages wait (timer.py)
TIMER_TOPIC = "rmq_sys_wheel_timer"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4


def save_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(json_body(obj))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_json(path: Path) -> Any:
    if not path.exists():
        return None
    with open(path, "rb") as fh:
        return json.loads(fh.read())


@dataclass
class TopicConfig:
    name: str
    read: int = 16
    write: int = 16
    perm: int = PERM_READ | PERM_WRITE
    sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read,
            "topicFilterType": "SINGLE_TAG",
            "topicName": self.name,
            "topicSysFlag": self.sys_flag,
            "writeQueueNums": self.write,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        return cls(
            str(obj["topicName"]),
            int(obj["readQueueNums"]),
            int(obj["writeQueueNums"]),
            int(obj["perm"]),
            int(obj.get("topicSysFlag", 0)),
            bool(obj.get("order", False)),
        )

    def __str__(self) -> str:  # TopicConfig.toString()
        return (
            f"TopicConfig [topicName={self.name}, readQueueNums={self.read}, writeQueueNums={self.write}, "
            f"perm={perm_to_string(self.perm)}, topicFilterType=SINGLE_TAG, topicSysFlag={self.sys_flag}, "
            f"order={'true' if self.order else 'false'}]"
        )


class BrokerState:
    """Topic configs, consumer offsets and subscription groups of one broker."""

    def __init__(
        self,
        broker_name: str,
        cluster: str,
        *,
        default_queues: int,
        auto_create: bool,
        schedule_queues: int,
        data_dir: Path | None,
        trace_topic: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.topics: dict[str, TopicConfig] = {}
        self.counter = 0
        self.version_ts = int(time.time() * 1000)
        self.offsets: dict[tuple[str, str], dict[int, int]] = {}  # (topic, group) -> queue -> offset
        self.groups: set[str] = set()
        #: SubscriptionGroupConfig beans set by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200); a group made
        #: by a heartbeat has Java's defaults
        self.group_configs: dict[str, dict[str, Any]] = {}
        self.dirty = False
        # TopicConfigManager's built-in topics
        self.topics["SELF_TEST_TOPIC"] = TopicConfig("SELF_TEST_TOPIC", 1, 1)
        if auto_create:
            self.topics[TBW102] = TopicConfig(TBW102, default_queues, default_queues, 7)
        self.topics["BenchmarkTest"] = TopicConfig("BenchmarkTest", 1024, 1024)
        self.topics[cluster] = TopicConfig(cluster, 16, 16, 7)
        self.topics[broker_name] = TopicConfig(broker_name, 1, 1, 7)
        self.topics["OFFSET_MOVED_EVENT"] = TopicConfig("OFFSET_MOVED_EVENT", 1, 1)
        self.topics[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, schedule_queues, schedule_queues)
        self.topics[f"{cluster}_REPLY_TOPIC"] = TopicConfig(f"{cluster}_REPLY_TOPIC", 1, 1)
        if trace_topic is not None:  # traceTopicEnable: one queue, a system topic
            self.topics[trace_topic] = TopicConfig(trace_topic, 1, 1)
        self.system_topics = frozenset(self.topics) | {TBW102}
        self._load()

    # -- topics -------------------------------------------------------------------------------

    def data_version(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.version_ts}

    def next_version(self) -> None:
        self.counter += 1
        self.version_ts = int(time.time() * 1000)
        self.dirty = True

    def put_topic(self, tc: TopicConfig) -> None:
        self.topics[tc.name] = tc
        self.next_version()

    def wrapper_json(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper."""
        return {
            "dataVersion": self.data_version(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.topics.items()},
        }

    # -- offsets ------------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.setdefault((topic, group), {})[queue_id] = offset
        self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        table = self.offsets.get((topic, group))
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def add_group(self, group: str) -> None:
        if group not in self.groups:
            self.groups.add(group)
            self.dirty = True

    def put_group_config(self, config: dict[str, Any]) -> None:
        """``updateSubscriptionGroupConfig``: the group exists with this config."""
        name = str(config["groupName"])
        self.groups.add(name)
        self.group_configs[name] = dict(config)
        self.dirty = True

    def delete_group(self, group: str, *, remove_offset: bool) -> None:
        """``deleteSubscriptionGroupConfig`` (and ``removeOffset`` of the group's offsets)."""
        self.groups.discard(group)
        self.group_configs.pop(group, None)
        if remove_offset:
            for key in [k for k in self.offsets if k[1] == group]:
                del self.offsets[key]
        self.dirty = True

    def delete_topic(self, topic: str) -> None:
        """``deleteTopicConfig``: gone from the table (its offsets stay, as 4.9.8 keeps them)."""
        if self.topics.pop(topic, None) is not None:
            self.next_version()

    # -- persistence --------------------------------------------------------------------------

    def _load(self) -> None:
        if self.data_dir is None:
            return
        cfg = self.data_dir / "config"
        topics = load_json(cfg / "topics.json")
        if topics:
            for obj in (topics.get("topicConfigTable") or {}).values():
                tc = TopicConfig.from_json(obj)
                self.topics[tc.name] = tc
            dv = topics.get("dataVersion") or {}
            self.counter = int(dv.get("counter", 0))
        offsets = load_json(cfg / "consumerOffset.json")
        if offsets:
            for key, table in (offsets.get("offsetTable") or {}).items():
                topic, _, group = str(key).partition("@")
                self.offsets[(topic, group)] = {int(q): int(o) for q, o in table.items()}
        groups = load_json(cfg / "subscriptionGroup.json")
        if groups:
            for name, config in (groups.get("subscriptionGroupTable") or {}).items():
                self.groups.add(str(name))
                if isinstance(config, dict) and len(config) > 3:  # more than the defaults written below
                    self.group_configs[str(name)] = config

    def persist(self, force: bool = False) -> None:
        """Write the JSON files if anything changed (or ``force``)."""
        if self.data_dir is None or not (self.dirty or force):
            return
        self.dirty = False
        cfg = self.data_dir / "config"
        save_json(cfg / "topics.json", self.wrapper_json())
        save_json(
            cfg / "consumerOffset.json",
            {
                "offsetTable": {
                    f"{t}@{g}": {str(q): o for q, o in tab.items()} for (t, g), tab in self.offsets.items()
                }
            },
        )
        save_json(
            cfg / "subscriptionGroup.json",
            {
                "subscriptionGroupTable": {
                    g: self.group_configs.get(g) or {"groupName": g, "retryQueueNums": 1, "retryMaxTimes": 16}
                    for g in sorted(self.groups)
                }
            },
        )
