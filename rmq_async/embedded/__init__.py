"""An embedded RocketMQ name server + broker speaking the real remoting protocol (tests, examples,
benchmarks). It imports only the sans-IO protocol layer, config and errors of this package."""

from __future__ import annotations

from .acl import Account as Account
from .acl import AclConfig as AclConfig
from .broker import Broker as Broker
from .cluster import EmbeddedCluster as EmbeddedCluster
from .cluster import RemoteBroker as RemoteBroker
from .faults import Faults as Faults
from .namesrv import NameServer as NameServer
from .tls import ServerTLS as ServerTLS

__all__ = [
    "Account",
    "AclConfig",
    "Broker",
    "EmbeddedCluster",
    "Faults",
    "NameServer",
    "RemoteBroker",
    "ServerTLS",
]
