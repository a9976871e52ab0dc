"""One public import level: what the README and the examples use comes from ``rmq_async``; the
sans-IO names from ``rmq_async.protocol``; consumer internals are not on the public objects."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import rmq_async
import rmq_async.embedded
import rmq_async.protocol
from rmq_async.protocol import bodies, headers

ROOT = Path(__file__).resolve().parents[2]


def _imports(source: str) -> list[tuple[str, str]]:
    """(module, name) of every ``from rmq_async... import name`` in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rmq_async"):
            out += [(node.module, alias.name) for alias in node.names]
    return out


def _readme_code() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    # a block may hold an excerpt that does not parse on its own: keep its import lines only
    lines = [
        ln for b in blocks for ln in b.splitlines() if ln.startswith(("from rmq_async", "import rmq_async"))
    ]
    return "\n".join(lines)


def test_the_readme_and_the_examples_import_from_rmq_async_itself() -> None:
    used = _imports(_readme_code())
    for path in sorted((ROOT / "examples").glob("*.py")):
        used += _imports(path.read_text())
    deep = sorted(
        {(m, n) for m, n in used if m not in ("rmq_async", "rmq_async.spark", "rmq_async.embedded")}
    )
    assert deep == [], deep  # e.g. rmq_async.producer.producer.select_by_key_hash (before)
    for module, name in used:
        if module == "rmq_async":
            assert name in rmq_async.__all__ and getattr(rmq_async, name) is not None, name


def test_the_names_users_need_are_public() -> None:
    for name in (
        "select_by_key_hash",
        "MessageQueueSelector",
        "RebalanceListener",
        "Handler",
        "OrderlyHandler",
        "DeliveryStream",
        "ConsumerHealth",
        "InvalidMessageError",
    ):
        assert name in rmq_async.__all__ and hasattr(rmq_async, name), name
    for name in ("EmbeddedCluster", "ServerTLS", "Account", "AclConfig"):
        assert name in rmq_async.embedded.__all__ and hasattr(rmq_async.embedded, name), name


def test_the_root_holds_the_client_api_and_the_embedded_names_moved_with_a_warning() -> None:
    import warnings

    for name in ("EmbeddedCluster", "ServerTLS", "Account", "AclConfig"):
        assert name not in rmq_async.__all__, name
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(rmq_async, name)
        assert value is getattr(rmq_async.embedded, name)
        assert [w.category for w in caught] == [DeprecationWarning], caught
        assert "rmq_async.embedded" in str(caught[0].message)


def test_the_protocol_package_exports_its_sans_io_names() -> None:
    p = rmq_async.protocol
    for name in ("RemotingCommand", "FrameDecoder", "decode_messages", "MessageExt", "PulledMessages",
                 "RequestCode", "ResponseCode", "encode_properties", "parse_properties", "Message",
                 "MessageQueue", *headers.__all__, *bodies.__all__):  # fmt: skip
        assert name in p.__all__ and hasattr(p, name), name


def test_importing_rmq_async_does_not_load_the_embedded_broker() -> None:
    code = "import sys, rmq_async; print(any(m.startswith('rmq_async.embedded') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_importing_rmq_async_loads_only_what_is_used() -> None:
    """Names load with their module on first use: a Spark executor or a producer script does not pay
    for every consumer and the OpenTelemetry support."""
    code = (
        "import sys, rmq_async; a = sorted(m for m in sys.modules if m.startswith('rmq_async.'));"
        "from rmq_async import Producer; b = 'rmq_async.consumer.push' in sys.modules;"
        "from rmq_async import PushConsumer; c = 'rmq_async.consumer.push' in sys.modules;"
        "print(a, b, c)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "['rmq_async.errors'] False True"
    assert sorted(rmq_async.__all__) == sorted(set(dir(rmq_async)) & set(rmq_async.__all__))
    for name in rmq_async.__all__:  # every name resolves, to the same object each time
        assert getattr(rmq_async, name) is getattr(rmq_async, name), name


def test_consumer_internals_are_not_on_the_public_objects() -> None:
    from rmq_async import Delivery, LitePullConsumer, PushConsumer

    for name in ("drop_queue", "compute_pull_from_where", "handle_server_request", "deadlines", "stability",
                 "inner_producer", "do_rebalance", "pqs", "offset_store", "consumer_data",
                 "subscribed_topics"):  # fmt: skip
        assert not hasattr(PushConsumer, name), name
    for name in ("handle_server_request", "consumer_data", "subscribed_topics"):
        assert not hasattr(LitePullConsumer, name), name
    assert not hasattr(LitePullConsumer, "do_rebalance")  # rebalance_now() + wait_rebalanced()
    assert "pq" not in Delivery.__slots__ and isinstance(Delivery.queue, property)


def test_every_public_member_of_the_consumers_has_a_docstring() -> None:
    import inspect

    from rmq_async import Delivery, LitePullConsumer, PushConsumer

    for cls in (PushConsumer, LitePullConsumer, Delivery):
        assert cls.__doc__, cls
        missing = [
            n for n, member in inspect.getmembers(cls) if not n.startswith("_") and not inspect.getdoc(member)
        ]
        assert missing == [], (cls.__name__, missing)


def test_every_config_field_is_described() -> None:
    from rmq_async import (
        ClientConfig,
        ConsumerConfig,
        Credentials,
        LitePullConfig,
        ProducerConfig,
        Timing,
        TLSConfig,
    )

    for cls in (ConsumerConfig, LitePullConfig, ClientConfig, ProducerConfig, Timing, TLSConfig, Credentials):
        assert [n for n, f in cls.model_fields.items() if not f.description] == [], cls.__name__


def test_no_public_attribute_of_an_instance_holds_an_internal_part() -> None:
    """What a user reaches from a consumer or producer is what the README documents: settings and
    methods. The parts (context, queue table, pull loop, rebalancer, services, admin answers, trace
    and OpenTelemetry observers) are private; tests and tools see them through
    :func:`rmq_async.internals.internals`."""
    from pydantic import BaseModel

    from rmq_async import LitePullConsumer, Producer, PushConsumer
    from rmq_async.internals import internals

    async def handler(msgs: object, ctx: object) -> None:
        return None

    objects: dict[str, Any] = {
        "push": PushConsumer("g", namesrv_addr="127.0.0.1:1", handler=handler, subscriptions={"T": "*"}),
        "orderly": PushConsumer(
            "g", namesrv_addr="127.0.0.1:1", handler=handler, subscriptions={"T": "*"}, orderly=True
        ),
        "deliveries": PushConsumer("g", namesrv_addr="127.0.0.1:1", subscriptions={"T": "*"}),
        "lite": LitePullConsumer("g", namesrv_addr="127.0.0.1:1"),
        "producer": Producer("g", namesrv_addr="127.0.0.1:1"),
    }
    plain = (str, int, float, bool, type(None), BaseModel)
    for label, obj in objects.items():
        public = {n: v for n, v in vars(obj).items() if not n.startswith("_")}
        parts = {
            n: type(v).__name__ for n, v in public.items() if not isinstance(v, plain) and v is not handler
        }
        assert parts == {}, (label, parts)
        assert internals(obj) is not None  # the parts are there, behind the seam
    for label in ("push", "orderly"):
        assert not any(hasattr(objects[label], n) for n in ("ctx", "table", "puller", "rebalancer",
                       "consume_service", "admin", "pop", "subcheck"))  # fmt: skip
