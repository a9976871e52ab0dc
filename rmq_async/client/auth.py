"""Telling an ACL refusal from other broker errors, and naming what it refused.

Strategy: pure functions over the answer's code and remark and the request's ext fields, called by
:class:`~.api.MQClientAPI` wherever an answer becomes a :class:`~rmq_async.errors.BrokerError`.

* 4.x brokers (ACL 1.0, ``PlainAccessValidator``) answer **code 1** SYSTEM_ERROR with the remark
  ``org.apache.rocketmq.acl.common.AclException: <msg>, <where>`` (the captures in
  ``tests/fixtures/acl/``: ``No acl config for AK``, ``Check signature failed for accessKey=AK``,
  ``No default permission for topic:T`` / ``group:G``, ``Need admin permission for request code=17, ...``,
  ``No accessKey is configured``).
* 5.x brokers (ACL 2.0, ``AuthenticationPipeline`` / ``AuthorizationPipeline``) answer **code 16**
  NO_PERMISSION with the exception's message: ``User:AK is not found.``, ``check signature failed.``,
  ``username cannot be null.``, ``User:AK has no permission to access Topic:T from IP, the decision is
  deny.`` ... Code 16 also answers a broker or topic whose *perm* forbids writing or reading (``the
  topic[T] sending message is forbidden``): that one is not an ACL refusal and stays a BrokerError.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import AuthError, BrokerError
from ..protocol.codes import ResponseCode

__all__ = ["auth_resource", "broker_error", "is_auth_refusal"]

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
_AUTH5 = re.compile(
    r"has no permission to access|check signature failed|username cannot be null|^User:.* is (?:not found|"
    r"disabled)|Authentication failed|authentication|authorization"
)
_RESOURCE4 = re.compile(r"No default permission for (topic|group):([^,\s]+)")
_RESOURCE5 = re.compile(r"to access (Topic|Group):(\S+) from")
_TOPIC_KEYS = ("topic", "b")  # SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE use short keys
_GROUP_KEYS = ("consumerGroup", "group", "a", "producerGroup")


def is_auth_refusal(code: int, remark: str | None) -> bool:
    """Whether an answer ``code`` with ``remark`` is an ACL refusal (4.x or 5.x broker)."""
    if not remark:
        return False
    if code == ResponseCode.SYSTEM_ERROR:
        return remark.startswith(ACL_EXCEPTION)
    if code == ResponseCode.NO_PERMISSION:
        return _AUTH5.search(remark) is not None
    return False


def auth_resource(remark: str | None, ext_fields: Mapping[str, str]) -> str | None:
    """``"topic:T"`` or ``"group:G"``: what the remark names, else the request's topic, else its group."""
    if remark:
        m = _RESOURCE4.search(remark) or _RESOURCE5.search(remark)
        if m:
            return f"{m.group(1).lower()}:{m.group(2)}"
    for k in _TOPIC_KEYS:
        if v := ext_fields.get(k):
            return f"topic:{v}"
    for k in _GROUP_KEYS:
        if v := ext_fields.get(k):
            return f"group:{v}"
    return None


def broker_error(
    code: int, remark: str | None, request_code: int, ext_fields: Mapping[str, str], addr: str
) -> BrokerError:
    """The error for an answer ``code``: an :class:`AuthError` for an ACL refusal, else a BrokerError."""
    if is_auth_refusal(code, remark):
        return AuthError(
            code,
            remark,
            request_code=request_code,
            addr=addr,
            resource=auth_resource(remark, ext_fields),
        )
    return BrokerError(code, remark, request_code=request_code, addr=addr)
