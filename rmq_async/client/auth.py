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
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import AuthError, BrokerError
from ..protocol.codes import ResponseCode

__all__ = ["AUTH_LOG_INTERVAL", "AuthErrorLog", "auth_resource", "broker_error", "is_auth_refusal"]

#: seconds between two log lines about refusals of one resource
AUTH_LOG_INTERVAL = 60.0

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


class AuthErrorLog:
    """The ACL refusals a client got lately, by resource: what to log, and what ``health()`` shows.

    :meth:`note` returns True when the refusal should be logged: the first one of its resource, then
    at most once per ``interval`` seconds (refused pulls repeat on every back-off).
    """

    __slots__ = ("_clock", "_entries", "_listeners", "interval")

    def __init__(self, interval: float = AUTH_LOG_INTERVAL, clock: Callable[[], float] | None = None) -> None:
        self.interval = interval
        self._clock = clock if clock is not None else time.monotonic
        # resource -> [last error, count, first seen, last seen, last logged]
        self._entries: dict[str, list[Any]] = {}
        self._listeners: list[Callable[[AuthError], object]] = []

    def add_listener(self, cb: Callable[[AuthError], object]) -> None:
        """Call ``cb(err)`` (synchronously) on every refusal noted (a lite consumer wakes its poll)."""
        self._listeners.append(cb)

    def note(self, err: AuthError) -> bool:
        for cb in self._listeners:
            cb(err)
        now = self._clock()
        key = err.resource or f"request {err.request_code}"
        e = self._entries.get(key)
        if e is None:
            self._entries[key] = [err, 1, now, now, now]
            return True
        e[0], e[3] = err, now
        e[1] += 1
        if now - e[4] >= self.interval:
            e[4] = now
            return True
        return False

    def clear(self, resource: str | None) -> None:
        """Forget ``resource`` (it was allowed again)."""
        if resource is not None:
            self._entries.pop(resource, None)

    def current(self, resources: set[str]) -> AuthError | None:
        """The latest refusal noted for one of ``resources`` and not cleared since."""
        found = [e for key, e in self._entries.items() if key in resources]
        return max(found, key=lambda e: e[3])[0] if found else None

    def snapshot(self) -> list[dict[str, Any]]:
        """One dict per refused resource: resource, request code, response code, remark, count, and
        seconds since the last refusal (never a credential: the remark holds the access key only)."""
        now = self._clock()
        return [
            {
                "resource": key,
                "request_code": err.request_code,
                "code": err.code,
                "remark": err.remark,
                "count": count,
                "seconds_ago": round(now - last, 3),
            }
            for key, (err, count, _first, last, _logged) in sorted(self._entries.items())
        ]

    def __bool__(self) -> bool:
        return bool(self._entries)
