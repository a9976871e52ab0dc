"""The admin client: topics, groups, offsets and messages of a cluster, as mqadmin handles them.

::

    from rmq_async.admin import Admin

    async with Admin("127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", read_queues=4, write_queues=4)
        print((await admin.progress("order-workers")).total_lag)
"""

from __future__ import annotations

from .client import Admin as Admin
from .client import set_consume_mode as set_consume_mode
from .models import BrokerInfo as BrokerInfo
from .models import ClientConnection as ClientConnection
from .models import ClusterInfo as ClusterInfo
from .models import GroupConnections as GroupConnections
from .models import GroupProgress as GroupProgress
from .models import QueueProgress as QueueProgress
from .models import QueueStatus as QueueStatus
from .models import TraceRecord as TraceRecord

__all__ = [
    "Admin",
    "BrokerInfo",
    "ClientConnection",
    "ClusterInfo",
    "GroupConnections",
    "GroupProgress",
    "QueueProgress",
    "QueueStatus",
    "TraceRecord",
    "set_consume_mode",
]
