"""One exception tree for the whole package.

Callers catch only these. The transport maps ``OSError`` and anyio errors into them
(``raise ... from exc``) at the one place where I/O happens.

    RocketMQError
    ├── ProtocolError            bytes that do not follow the remoting protocol
    │   └── FrameError           the frame layer (length, header length, serialize type)
    ├── RemotingError            the connection layer
    │   ├── ConnectError         could not connect to an address
    │   │   └── TLSError         the TLS handshake failed (untrusted certificate, wrong host, no TLS)
    │   ├── RequestTimeout       no answer within the request's timeout
    │   └── ConnectionClosed     the connection is gone (pending requests fail with this)
    ├── BrokerError(code, remark)  the server answered with an error code
    │   ├── TopicNotExist        code 17 on a route lookup
    │   ├── SubscriptionRefused  a broker refused a SQL92 subscription (CHECK_CLIENT_CONFIG, at start)
    │   └── AuthError            refused by ACL: wrong or unknown key, missing permission (not retried)
    ├── ClientError              misuse of the API (not started, closed, wrong state)
    │   └── UnsupportedByBrokerError  the broker's version lacks the feature (a timer on 4.x)
    ├── ConfigError              invalid configuration (wraps pydantic's ValidationError)
    ├── MQClientError            a client-side operation failed after its retries (no route, ...)
    └── RequestTimeoutError      a request was sent, but no reply came in time (request-reply)
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "BrokerError",
    "ClientError",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "FrameError",
    "InvalidMessageError",
    "MQClientError",
    "ProtocolError",
    "RemotingError",
    "RequestTimeout",
    "RequestTimeoutError",
    "RocketMQError",
    "SubscriptionRefused",
    "TLSError",
    "TopicNotExist",
    "UnsupportedByBrokerError",
]

# Response codes after which the same request may succeed later (ResponseCode.java).
_RETRIABLE_CODES = frozenset({1, 2, 10, 11, 12, 14, 17, 19, 20, 22, 25, 215})


class RocketMQError(Exception):
    """Base of every error this package raises."""

    retriable: bool = False


class ProtocolError(RocketMQError):
    """Bytes that do not follow the remoting protocol (frames, headers, bodies, messages)."""


class FrameError(ProtocolError):
    """A frame whose length prefix, header length or serialize type is invalid."""


class RemotingError(RocketMQError):
    """A failure of the connection to ``addr``."""

    retriable = True

    def __init__(self, message: str, addr: str | None = None) -> None:
        super().__init__(message if addr is None else f"{message} [{addr}]")
        self.addr = addr


class ConnectError(RemotingError):
    """Could not open a connection to ``addr``."""


class TLSError(ConnectError):
    """The TLS handshake with ``addr`` failed: the server's certificate is not trusted (wrong CA, name
    mismatch), the server refused ours, or it does not speak TLS. Not retriable: the same settings get
    the same answer (the connection pool waits its longest back-off before dialing again)."""

    retriable = False


class RequestTimeout(RemotingError):
    """No response to request ``code`` from ``addr`` within ``timeout`` seconds."""

    def __init__(self, code: int, addr: str | None, timeout: float) -> None:
        super().__init__(f"request code {code} got no response within {timeout:.3f}s", addr)
        self.code = code
        self.timeout = timeout


class ConnectionClosed(RemotingError):
    """The connection was closed (by us or the peer) while a request was pending or being sent."""


class BrokerError(RocketMQError):
    """The server answered request ``request_code`` with error ``code`` and ``remark``."""

    def __init__(
        self, code: int, remark: str | None, *, request_code: int | None = None, addr: str | None = None
    ) -> None:
        where = ""
        if request_code is not None:
            where += f" to request {request_code}"
        if addr:
            where += f" from {addr}"
        super().__init__(f"broker answered code {code}{where}: {remark or '(no remark)'}")
        self.code = code
        self.remark = remark
        self.request_code = request_code
        self.addr = addr
        self.retriable = code in _RETRIABLE_CODES


class TopicNotExist(BrokerError):
    """The name server has no route for the topic (code 17)."""


class SubscriptionRefused(BrokerError):
    """A broker refused subscription ``expression`` (``expression_type``) of ``topic`` when asked
    with CHECK_CLIENT_CONFIG (Java ``checkClientInBroker``): code 1 when property filters are off
    (``enablePropertyFilter=false``, the broker's default), code 23 (SUBSCRIPTION_PARSE_FAILED) when
    it cannot compile the expression; ``remark`` is the broker's. Not retriable."""

    def __init__(
        self,
        code: int,
        remark: str | None,
        *,
        topic: str,
        expression: str,
        expression_type: str = "SQL92",
        group: str = "",
        addr: str | None = None,
    ) -> None:
        super().__init__(code, remark, request_code=46, addr=addr)
        if code == 1:
            why = "it does not support filtering by SQL92 (set enablePropertyFilter=true on the broker)"
        elif code == 23:
            why = "it cannot parse the expression"
        else:
            why = "it refused it"
        by = f" {addr}" if addr else ""
        self.args = (
            f"broker{by} refused the {expression_type} subscription {expression!r} of topic {topic!r}"
            f"{f' (group {group})' if group else ''}: {why} (code {code}: {remark or '(no remark)'})",
        )
        self.topic = topic
        self.expression = expression
        self.expression_type = expression_type
        self.retriable = False


class AuthError(BrokerError):
    """The server refused request ``request_code`` for access control (ACL), answering ``code``.

    4.x brokers answer code 1 (SYSTEM_ERROR) with an ``AclException`` remark; 5.x brokers code 16
    (NO_PERMISSION) for authentication and authorization failures. ``resource`` is the topic or group
    concerned (``"topic:T"``, ``"group:G"``) when the remark or the request names one. Never retriable:
    the same keys get the same answer until the broker's ACL or the credentials change.
    """

    def __init__(
        self,
        code: int,
        remark: str | None,
        *,
        request_code: int | None = None,
        addr: str | None = None,
        resource: str | None = None,
    ) -> None:
        super().__init__(code, remark, request_code=request_code, addr=addr)
        where = f" to request {request_code}" if request_code is not None else ""
        on = f" on {resource}" if resource else ""
        by = f" by {addr}" if addr else ""
        self.args = (f"access denied{where}{on}{by} (code {code}): {remark or '(no remark)'}",)
        self.resource = resource
        self.retriable = False


class ClientError(RocketMQError):
    """The API was used in a state that does not allow it (not started, already closed, ...)."""


class UnsupportedByBrokerError(ClientError):
    """Broker ``addr`` (MQVersion ordinal ``version``) cannot do ``feature``: refused before sending,
    since the broker would take the request and ignore what it does not know (a 4.9.8 broker delivers
    a timer message at once)."""

    def __init__(self, feature: str, addr: str, version: int, needs: str) -> None:
        super().__init__(f"broker {addr} (version {version}) does not support {feature}: it needs {needs}")
        self.feature = feature
        self.addr = addr
        self.version = version


class ConfigError(RocketMQError, ValueError):
    """A configuration value is invalid; the message names the field."""


class InvalidMessageError(ConfigError):
    """A :class:`~rmq_async.Message` cannot be built as given: ``field`` names the argument (``topic``,
    ``body``, ``keys``, ``tags``, ``properties``, ``flag``, ``delay_level``) and the message says why
    (Java's ``Validators.checkMessage`` and the wire's limits), when the message is made, not at
    ``send()``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"Message {field}: {reason}")
        self.field = field
        self.reason = reason


class MQClientError(RocketMQError):
    """A client operation failed after its retries (no route, no broker available, ...)."""

    retriable = True


class RequestTimeoutError(RocketMQError):
    """The request message went to ``topic``, but no reply came within ``timeout`` seconds (Java's
    ``RequestTimeoutException``, code 10006). Not retriable as it is: the request was delivered, a
    responder may still be at it."""

    def __init__(self, topic: str, timeout: float, correlation_id: str) -> None:
        ms = round(timeout * 1000)
        super().__init__(f"send request message to <{topic}> OK, but wait reply message timeout, {ms} ms")
        self.topic = topic
        self.timeout = timeout
        self.correlation_id = correlation_id
