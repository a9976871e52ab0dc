"""The name server's order config of a topic, as ``mqadmin updateTopic -o true`` writes it.

The value (namespace ``ORDER_TOPIC_CONFIG``, key the topic) is ``brokerName:writeQueueNums`` per
broker, joined by ``;``. Java builds it from hash containers, so its order is theirs: a cluster's
broker names as the ``HashSet`` of ``fetchBrokerNameByClusterName`` iterates them, a single broker's
entry merged into the old value through a ``HashMap`` keyed by broker name
(``DefaultMQAdminExtImpl.createOrUpdateOrderConf``). Pure: the admin reads and writes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..protocol.fastjson import java_map_order

__all__ = ["cluster_order_conf", "merged_order_conf"]


def cluster_order_conf(broker_names: Iterable[str], write_queues: int) -> str:
    """Every broker of a cluster with ``write_queues`` queues (the cluster form: the old value is
    replaced)."""
    names = java_map_order({n: n for n in broker_names})
    return ";".join(f"{n}:{write_queues}" for n in names)


def merged_order_conf(old: str | None, broker_name: str, write_queues: int) -> str:
    """``old`` with ``broker_name``'s entry set to ``write_queues`` (the single-broker form)."""
    entries: dict[str, str] = {}
    for item in (old or "").split(";"):
        if item.strip():
            entries[item.split(":")[0]] = item
    entries[broker_name] = f"{broker_name}:{write_queues}"
    return ";".join(java_map_order(entries).values())
