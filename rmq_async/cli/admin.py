"""``rmq-async admin``: cluster administration, as ``mqadmin`` does it.

``admin set-consume-mode --namesrv ADDR --topic T --group G --mode POP|PULL [--pop-share-queue-num N]``
sends SET_MESSAGE_REQUEST_MODE (401) to the master of every broker of the topic (``mqadmin
setConsumeMode``): a 5.x broker then assigns the topic to the group's members in that mode
(QUERY_ASSIGNMENT), which a consumer with ``client_rebalance=False`` (``consume --pop``) follows.
It prints one line per broker and exits 0 when every broker took it, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from ..admin import set_consume_mode
from ..errors import RocketMQError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="admin_command", required=True, metavar="{set-consume-mode}")
    sc = sub.add_parser(
        "set-consume-mode",
        help="switch a group's consumption of a topic to POP or PULL on every broker of the topic",
        description="SET_MESSAGE_REQUEST_MODE (401) to the master of every broker of the topic, as "
        "mqadmin setConsumeMode. POP: the brokers hand messages of any queue to any member of the group "
        "(consume --pop); PULL: queues are allocated to members.",
    )
    sc.add_argument("--namesrv", default=None, help="name server HOST:PORT (default: $NAMESRV_ADDR)")
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


async def run(args: argparse.Namespace, namesrv_addr: str) -> int:
    try:
        answers = await set_consume_mode(
            args.topic, args.group, args.mode, args.pop_share_queue_num, namesrv_addr=namesrv_addr
        )
    except RocketMQError as exc:
        print(f"rmq-async: set-consume-mode failed: {exc}", file=sys.stderr, flush=True)
        return 1
    ok = True
    for addr, (code, remark) in answers.items():
        ok &= code == 0
        print(f"{addr}: {'OK' if code == 0 else f'code {code}: {remark}'}", flush=True)
    if not answers:
        print(f"rmq-async: no broker master serves {args.topic}", file=sys.stderr, flush=True)
        return 1
    return 0 if ok else 1
