"""``rmq-async admin``: cluster administration over :class:`rmq_async.admin.Admin`, as mqadmin.

``cluster``; ``topic list|create|delete|route|status``; ``group list|progress|connections|reset``;
``message get|query|trace``; ``set-consume-mode``. Each takes ``--namesrv`` (default
``$NAMESRV_ADDR``), the TLS and ACL flags of the other commands, and ``--json``. Output: a table
(``rich``) on a terminal; with ``--json`` or when stdout is not a terminal, one JSON object on one
line. Exit 0 on success, 1 when the cluster refused or did not answer (one line on stderr), 2 for bad
input. ``set-consume-mode`` keeps its lines (``ADDR: OK`` per broker) unless ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ..admin import Admin
from ..config import ClientConfig
from ..errors import ConfigError, RocketMQError
from ..protocol.bodies import JsonBody
from ..protocol.mq import MessageQueue
from ..protocol.stored import MessageExt
from .args import UsageError, count, epoch_ms, namesrv_addr, positive
from .auth import add_credential_arguments, credentials_from_args
from .tls import add_tls_arguments, tls_options

__all__ = ["add_arguments", "run"]

_NAMESRV_HELP = "name server(s), HOST:PORT[;HOST:PORT...] (default: $NAMESRV_ADDR)"


# -- the parser ----------------------------------------------------------------------------------


def _shared() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--namesrv", type=namesrv_addr, default=None, metavar="ADDR", help=_NAMESRV_HELP)
    p.add_argument(
        "--json", action="store_true", help="one JSON object on one line (the default off a terminal)"
    )
    add_tls_arguments(p)
    add_credential_arguments(p)
    return p


def _offset_arg(text: str) -> tuple[str | None, int, int]:
    """``[BROKER:]QUEUE=OFFSET`` of ``--to-offset``."""
    where, sep, off = text.rpartition("=")
    broker, _, queue = where.rpartition(":")
    if not sep or not queue.isdigit() or not off.isdigit():
        raise argparse.ArgumentTypeError(f"expected [BROKER:]QUEUE=OFFSET, got {text!r}")
    return broker or None, int(queue), int(off)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shared = _shared()
    sub = parser.add_subparsers(
        dest="admin_command", required=True, metavar="{cluster,topic,group,message,set-consume-mode}"
    )

    def command(parent: Any, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help, description=description or help, parents=[shared]
        )
        return p

    command(sub, "cluster", "brokers of every cluster with their runtime figures (mqadmin clusterList)")

    topic = sub.add_parser("topic", help="topics: list, create, delete, route, status").add_subparsers(
        dest="topic_command", required=True, metavar="{list,create,delete,route,status}"
    )
    command(topic, "list", "every topic of the name server (mqadmin topicList)")
    cr = command(
        topic, "create", "create or update a topic on every master of a cluster (mqadmin updateTopic)"
    )
    cr.add_argument("--topic", required=True)
    cr.add_argument("--read-queues", type=positive, default=8, metavar="N", help="default: %(default)s")
    cr.add_argument("--write-queues", type=positive, default=8, metavar="N", help="default: %(default)s")
    cr.add_argument("--perm", type=count, default=6, help="2 write, 4 read, 6 both (default: %(default)s)")
    cr.add_argument("--cluster", default=None, help="default: the only (else the first) cluster")
    cr.add_argument("--broker-addr", default=None, metavar="ADDR", help="this broker only")
    cr.add_argument("--order", action="store_true", help="an ordered topic")
    de = command(
        topic, "delete", "delete a topic from the masters and the name servers (mqadmin deleteTopic)"
    )
    de.add_argument("--topic", required=True)
    de.add_argument("--cluster", default=None)
    for name, what in (("route", "mqadmin topicRoute"), ("status", "offsets per queue, mqadmin topicStatus")):
        command(topic, name, f"the topic's {name} ({what})").add_argument("--topic", required=True)

    group = sub.add_parser(
        "group", help="consumer groups: list, progress, connections, running-info, reset"
    ).add_subparsers(
        dest="group_command", required=True, metavar="{list,progress,connections,running-info,reset}"
    )
    command(group, "list", "groups with a %%RETRY%% topic (as mqadmin consumerProgress without -g)")
    pg = command(group, "progress", "offsets and lag per queue (mqadmin consumerProgress -g)")
    pg.add_argument("--group", required=True)
    pg.add_argument("--topic", default=None)
    command(group, "connections", "the group's members (mqadmin consumerConnection)").add_argument(
        "--group", required=True
    )
    ri = command(
        group,
        "running-info",
        "one member's running info, through the broker: its settings, subscriptions and queues "
        "(mqadmin consumerStatus -g G -i ID)",
    )
    ri.add_argument("--group", required=True)
    ri.add_argument("--client-id", required=True, metavar="ID", help="as 'group connections' lists it")
    rs = command(
        group,
        "reset",
        "move the group's offsets on a topic (mqadmin resetOffsetByTime; online members move at once, "
        "an offline group gets its offsets committed)",
    )
    rs.add_argument("--group", required=True)
    rs.add_argument("--topic", required=True)
    to = rs.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to-timestamp", type=epoch_ms, metavar="MS", help="the first message stored at MS or later"
    )
    to.add_argument("--to-earliest", action="store_true", help="each queue's first offset")
    to.add_argument("--to-latest", action="store_true", help="each queue's max offset (skip everything)")
    to.add_argument(
        "--to-offset",
        type=_offset_arg,
        nargs="+",
        metavar="[BROKER:]Q=OFF",
        help="these queues to these offsets (the broker may be left out when the topic has one)",
    )

    message = sub.add_parser("message", help="messages: get, query, trace, resend").add_subparsers(
        dest="message_command", required=True, metavar="{get,query,trace,resend}"
    )
    get = command(message, "get", "a message by offset id or UNIQ_KEY (mqadmin queryMsgById)")
    get.add_argument("--id", required=True, help="offset message id, or UNIQ_KEY (then --topic)")
    get.add_argument("--topic", default=None)
    get.add_argument("--body", action="store_true", help="print the body too (UTF-8)")
    qu = command(message, "query", "messages by key (mqadmin queryMsgByKey)")
    qu.add_argument("--topic", required=True)
    qu.add_argument("--key", required=True)
    qu.add_argument("--max-num", type=positive, default=64, metavar="N", help="default: %(default)s")
    tr = command(message, "trace", "the trace records of a message (mqadmin queryMsgTraceById)")
    tr.add_argument("--id", required=True, help="the message's msg id (UNIQ_KEY)")
    tr.add_argument("--trace-topic", default="RMQ_SYS_TRACE_TOPIC")
    rd = command(
        message,
        "resend",
        "hand one stored message to one member's handler now, through the broker, and print its "
        "answer (mqadmin queryMsgById -g G -d ID -i MSGID)",
    )
    rd.add_argument("--group", required=True)
    rd.add_argument("--client-id", required=True, metavar="ID", help="as 'group connections' lists it")
    rd.add_argument("--id", required=True, help="offset message id, or UNIQ_KEY (then --topic)")
    rd.add_argument("--topic", default=None)

    sc = command(
        sub,
        "set-consume-mode",
        "switch a group's consumption of a topic to POP or PULL on every broker of the topic",
        "SET_MESSAGE_REQUEST_MODE (401) to the master of every broker of the topic, as mqadmin "
        "setConsumeMode. POP: the brokers hand messages of any queue to any member of the group "
        "(consume --pop); PULL: queues are allocated to members.",
    )
    sc.add_argument("--topic", required=True)
    sc.add_argument("--group", required=True)
    sc.add_argument("--mode", required=True, choices=("POP", "PULL"))
    sc.add_argument(
        "--pop-share-queue-num",
        type=int,
        default=0,
        metavar="N",
        help="POP: each member reads its share of the queues plus N neighbours' (0, or at least "
        "members - 1: every member reads every queue; default: %(default)s)",
    )


# -- turning results into JSON and tables -----------------------------------------------------------


def _mq(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker": mq.broker_name, "queue": mq.queue_id}


def _message(m: MessageExt, *, body: bool = False) -> dict[str, Any]:
    out = {
        "topic": m.topic,
        "broker": m.broker_name,
        "queue": m.queue_id,
        "offset": m.queue_offset,
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "keys": m.keys,
        "tags": m.tags,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "store_host": m.store_host,
        "reconsume_times": m.reconsume_times,
        "body_size": len(m.body),
    }
    if body:
        out["body"] = m.body.decode("utf-8", "replace")
    return out


def _plain(value: Any) -> Any:
    """JSON-able data of a result: dataclasses by field (plus their properties named in ``_EXTRA``),
    queues as objects, bodies as their wire beans."""
    if isinstance(value, MessageQueue):
        return _mq(value)
    if isinstance(value, MessageExt):
        return _message(value)
    if isinstance(value, JsonBody):
        return value.to_bean()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in _EXTRA.get(type(value).__name__, ()):
            out[name] = getattr(value, name)
        return out
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


_EXTRA = {"GroupProgress": ("total_lag",), "QueueProgress": ("lag",), "GroupConnections": ("online",)}

Row = Sequence[Any]


def _table(title: str, columns: Sequence[str], rows: Sequence[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    Console().print(t)


# -- the commands -----------------------------------------------------------------------------------

#: what a command returns: the JSON object, and the table (title, columns, rows)
Result = tuple[dict[str, Any], tuple[str, Sequence[str], Sequence[Row]]]
Command = Callable[[Admin, argparse.Namespace], Coroutine[Any, Any, Result]]


async def _cluster(admin: Admin, args: argparse.Namespace) -> Result:
    info = await admin.cluster()
    rows = [
        (b.cluster, b.name, b.broker_id, b.addr, (b.stats or {}).get("brokerVersionDesc", "unreachable"),
         (b.stats or {}).get("msgPutTotalTodayNow", ""))
        for b in info.brokers
    ]  # fmt: skip
    return _plain({"brokers": info.brokers, "clusters": info.clusters}), (
        "clusters",
        ("cluster", "broker", "id", "address", "version", "put today"),
        rows,
    )


async def _topic_list(admin: Admin, args: argparse.Namespace) -> Result:
    topics = await admin.topics()
    return {"topics": topics}, ("topics", ("topic",), [(t,) for t in topics])


async def _topic_create(admin: Admin, args: argparse.Namespace) -> Result:
    written = await admin.create_topic(
        args.topic,
        read_queues=args.read_queues,
        write_queues=args.write_queues,
        perm=args.perm,
        cluster=args.cluster,
        broker_addr=args.broker_addr,
        order=args.order,
    )
    return {"topic": args.topic, "brokers": written}, (
        f"created {args.topic}",
        ("broker",),
        [(a,) for a in written],
    )


async def _topic_delete(admin: Admin, args: argparse.Namespace) -> Result:
    await admin.delete_topic(args.topic, cluster=args.cluster)
    return {"topic": args.topic, "deleted": True}, (f"deleted {args.topic}", ("topic",), [(args.topic,)])


async def _topic_route(admin: Admin, args: argparse.Namespace) -> Result:
    route = await admin.route(args.topic)
    addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
    rows = [
        (
            q.broker_name,
            q.read_queue_nums,
            q.write_queue_nums,
            q.perm,
            addrs.get(q.broker_name, {}).get(0, ""),
        )
        for q in route.queue_datas
    ]
    return {"topic": args.topic, "route": route.to_bean()}, (
        f"route of {args.topic}",
        ("broker", "read", "write", "perm", "master"),
        rows,
    )


async def _topic_status(admin: Admin, args: argparse.Namespace) -> Result:
    status = await admin.topic_status(args.topic)
    rows = [
        (q.mq.broker_name, q.mq.queue_id, q.min_offset, q.max_offset, q.last_update_timestamp) for q in status
    ]
    return {"topic": args.topic, "queues": _plain(status)}, (
        f"status of {args.topic}",
        ("broker", "queue", "min", "max", "last update ms"),
        rows,
    )


async def _group_list(admin: Admin, args: argparse.Namespace) -> Result:
    groups = await admin.groups()
    return {"groups": groups}, ("groups", ("group",), [(g,) for g in groups])


async def _group_progress(admin: Admin, args: argparse.Namespace) -> Result:
    p = await admin.progress(args.group, args.topic)
    rows = [
        (q.mq.topic, q.mq.broker_name, q.mq.queue_id, q.broker_offset, q.consumer_offset, q.lag)
        for q in p.queues
    ]
    return _plain(p), (
        f"progress of {args.group}: lag {p.total_lag}, {p.consume_tps:.1f} msg/s",
        ("topic", "broker", "queue", "broker offset", "consumer offset", "lag"),
        rows,
    )


async def _group_connections(admin: Admin, args: argparse.Namespace) -> Result:
    c = await admin.connections(args.group)
    rows = [(m.client_id, m.client_addr, m.language, m.version) for m in c.clients]
    title = f"{args.group}: {c.message_model} {c.consume_type}" if c.online else f"{args.group}: not online"
    return _plain(c), (title, ("client id", "address", "language", "version"), rows)


async def _group_running_info(admin: Admin, args: argparse.Namespace) -> Result:
    info = await admin.running_info(args.group, args.client_id)
    props = info.properties
    queues = sorted(info.mq_table.items())
    rows = [
        (mq.topic, mq.broker_name, mq.queue_id, q.commit_offset, q.cached_msg_count, q.locked,
         q.last_pull_timestamp, q.last_consume_timestamp)
        for mq, q in queues
    ]  # fmt: skip
    kind = " ".join(p for p in (props.get("messageModel"), props.get("PROP_CONSUME_TYPE")) if p)
    return {
        "group": args.group,
        "client_id": args.client_id,
        "properties": dict(sorted(props.items())),
        "subscriptions": {sd.topic: sd.sub_string for sd in info.subscription_set},
        "queues": [{**_mq(mq), **q.to_bean()} for mq, q in queues],
        "status": {t: st.to_bean() for t, st in sorted(info.status_table.items())},
    }, (
        f"{args.client_id} of {args.group}: {kind}".rstrip(": "),
        ("topic", "broker", "queue", "commit offset", "cached", "locked", "last pull ms", "last consume ms"),
        rows,
    )


async def _queues(
    admin: Admin, topic: str, wanted: Sequence[tuple[str | None, int, int]]
) -> dict[MessageQueue, int]:
    """``--to-offset`` values as queues of the topic's route: the broker named, or its only one."""
    queues = {q.broker_name: q.read_queue_nums for q in (await admin.route(topic)).queue_datas}
    out: dict[MessageQueue, int] = {}
    for broker, queue, offset in wanted:
        if broker is None:
            if len(queues) != 1:
                raise UsageError(
                    f"{topic} is on brokers {sorted(queues)}: give --to-offset BROKER:{queue}={offset}"
                )
            broker = next(iter(queues))
        if queue >= queues.get(broker, 0):
            raise UsageError(
                f"{topic} has no queue {queue} on {broker} ({queues.get(broker, 0)} queues there)"
            )
        out[MessageQueue(topic, broker, queue)] = offset
    return out


async def _group_reset(admin: Admin, args: argparse.Namespace) -> Result:
    if args.to_offset:
        moved = await admin.reset_offset(
            args.group, args.topic, offsets=await _queues(admin, args.topic, args.to_offset)
        )
    elif args.to_timestamp is not None:
        moved = await admin.reset_offset(args.group, args.topic, timestamp=args.to_timestamp)
    else:
        moved = await admin.reset_offset(
            args.group, args.topic, to="earliest" if args.to_earliest else "latest"
        )
    rows = [(mq.broker_name, mq.queue_id, off) for mq, off in moved.items()]
    return {
        "group": args.group,
        "topic": args.topic,
        "offsets": [{**_mq(mq), "offset": o} for mq, o in moved.items()],
    }, (
        f"{args.group} on {args.topic}",
        ("broker", "queue", "offset"),
        rows,
    )


_MESSAGE_COLUMNS = ("topic", "queue", "offset", "msg id", "keys", "tags", "stored ms")


def _message_row(m: MessageExt) -> Row:
    return (m.topic, m.queue_id, m.queue_offset, m.msg_id, m.keys, m.tags, m.store_timestamp)


async def _message_get(admin: Admin, args: argparse.Namespace) -> Result:
    m = await admin.message_by_id(args.id, topic=args.topic)
    return {"message": _message(m, body=args.body)}, (
        f"message {args.id}",
        _MESSAGE_COLUMNS,
        [_message_row(m)],
    )


async def _message_query(admin: Admin, args: argparse.Namespace) -> Result:
    msgs = await admin.query_by_key(args.topic, args.key, max_num=args.max_num)
    return {"messages": [_message(m) for m in msgs]}, (
        f"key {args.key} in {args.topic}",
        _MESSAGE_COLUMNS,
        [_message_row(m) for m in msgs],
    )


async def _message_trace(admin: Admin, args: argparse.Namespace) -> Result:
    records = await admin.message_trace(args.id, trace_topic=args.trace_topic)
    rows = [
        (r.trace_type, r.timestamp, r.group, r.topic, r.store_host, r.cost_time, r.success) for r in records
    ]
    return {"msg_id": args.id, "records": _plain(records)}, (
        f"trace of {args.id}",
        ("type", "time ms", "group", "topic", "store host", "cost ms", "success"),
        rows,
    )


async def _message_resend(admin: Admin, args: argparse.Namespace) -> Result:
    r = await admin.consume_directly(args.group, args.client_id, args.id, topic=args.topic)
    return {
        "group": args.group,
        "client_id": args.client_id,
        "msg_id": args.id,
        "consume_result": r.consume_result,
        "order": r.order,
        "auto_commit": r.auto_commit,
        "remark": r.remark,
        "spent_ms": r.spent_time_mills,
    }, (
        f"{args.id} consumed by {args.client_id}",
        ("result", "order", "auto commit", "spent ms", "remark"),
        [(r.consume_result, r.order, r.auto_commit, r.spent_time_mills, r.remark)],
    )


_COMMANDS: dict[tuple[str, str | None], Command] = {
    ("cluster", None): _cluster,
    ("topic", "list"): _topic_list,
    ("topic", "create"): _topic_create,
    ("topic", "delete"): _topic_delete,
    ("topic", "route"): _topic_route,
    ("topic", "status"): _topic_status,
    ("group", "list"): _group_list,
    ("group", "progress"): _group_progress,
    ("group", "connections"): _group_connections,
    ("group", "running-info"): _group_running_info,
    ("group", "reset"): _group_reset,
    ("message", "get"): _message_get,
    ("message", "query"): _message_query,
    ("message", "trace"): _message_trace,
    ("message", "resend"): _message_resend,
}


def _config(args: argparse.Namespace, namesrv: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=namesrv, credentials=credentials_from_args(args), **tls_options(args))


async def run(args: argparse.Namespace, namesrv_addr: str) -> int:
    as_json = args.json or not sys.stdout.isatty()
    cfg = _config(args, namesrv_addr)
    what = args.admin_command
    try:
        async with Admin(client_config=cfg) as admin:
            if what == "set-consume-mode":
                return _consume_mode(
                    await admin.set_consume_mode(args.topic, args.group, args.mode, args.pop_share_queue_num),
                    args,
                )
            sub = getattr(args, f"{what}_command", None)
            obj, (title, columns, rows) = await _COMMANDS[(what, sub)](admin, args)
    except ConfigError:
        raise  # bad input: exit 2 (main)
    except RocketMQError as exc:
        label = " ".join(p for p in (what, getattr(args, f"{what}_command", None)) if p)
        why = " ".join(str(exc).split())  # a broker's remark may hold line breaks: one line
        print(f"rmq-async: admin {label} failed: {why}", file=sys.stderr, flush=True)
        return 1
    if as_json:
        print(json.dumps(obj, separators=(",", ":"), ensure_ascii=False), flush=True)
    else:
        _table(title, columns, rows)
    return 0


def _consume_mode(answers: dict[str, tuple[int, str | None]], args: argparse.Namespace) -> int:
    """``set-consume-mode``: one ``ADDR: OK`` (or ``ADDR: code N: remark``) line per broker as before,
    or with ``--json`` one object; exit 1 unless every broker took it."""
    ok = bool(answers) and all(code == 0 for code, _ in answers.values())
    if args.json:
        brokers = {a: {"code": c, "remark": r} for a, (c, r) in answers.items()}
        print(
            json.dumps(
                {"topic": args.topic, "group": args.group, "mode": args.mode, "ok": ok, "brokers": brokers}
            )
        )
        return 0 if ok else 1
    for addr, (code, remark) in answers.items():
        print(f"{addr}: {'OK' if code == 0 else f'code {code}: {remark}'}", flush=True)
    if not answers:
        print(f"rmq-async: no broker master serves {args.topic}", file=sys.stderr, flush=True)
    return 0 if ok else 1
