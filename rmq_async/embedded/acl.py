"""Access control for the embedded broker, as the real brokers enforce it.

Strategy: :class:`AclConfig` holds the accounts of a ``plain_acl.yml`` (loaded from that file, so one
file serves a real broker and this one, or built in Python); :class:`AclChecker` decides one request
from its code, ext fields, body and the peer's IP, returning the refusal (code, remark) or None, and
:func:`guard` wraps the broker's dispatch with it. With ACL off nothing is wrapped: no cost. The
name server does not check (4.9.8's does not).

Flavour 4 follows 4.9.8's ``PlainAccessValidator.parse`` (which resources a request code needs) and
``PlainPermissionManager.validate`` / ``checkPerm`` (the order: global IP whitelist, no access key,
unknown key, the account's IP whitelist, signature, admin-only codes, then each resource in HashMap
order); a refusal is code 1 with an ``AclException`` remark naming the Java method and line the real
broker prints (``tests/fixtures/acl/acl-denied.jsonl``). Its quirks are kept: SEND_BATCH_MESSAGE is
checked for the signature only (upstream #5303), ``_UNIQUE_KEY_QUERY`` is left out of the verified
content, a whitelisted address skips the signature and the permissions, PUB on the trace topic
``RMQ_SYS_TRACE_TOPIC`` skips the permission check, and ``%RETRY%<group>`` stands for the group.

Flavour 5 follows 5.3.3, where a ``plain_acl.yml`` is migrated to ACL 2.0 (``AuthMigrator``): each
account becomes a user (admin: a super user, never authorized), its topic and group permissions a
custom policy, its defaults a default policy; IP whitelists are not migrated, so they do not apply.
Authentication failures and missing permissions are code 16 NO_PERMISSION with the 5.x messages
(``User:AK is not found.``, ``check signature failed.``, ``User:AK has no permission to access
Topic:T from IP, the decision is deny.``); resources follow ``DefaultAuthorizationContextBuilder``
(batches are checked; retry topics are their group). Request codes outside its table are only
authenticated here (the real broker reads annotations on their headers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol.acl import ACCESS_KEY, SIGNATURE, verify
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.fastjson import java_map_order, loads
from .server import Connection, Reply, error_response

__all__ = ["Account", "AclChecker", "AclConfig", "guard", "parse_perm"]

# Permission bits (``org.apache.rocketmq.acl.common.Permission``)
DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
RETRY = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: ``Permission.ADMIN_CODE``: create/delete topic and subscription group, update the broker config
ADMIN_CODES = frozenset({17, 25, 200, 207, 215})

_EXC = "org.apache.rocketmq.acl.common.AclException: "
_AT = ", org.apache.rocketmq.acl.plain.PlainPermissionManager."


def _remark4(msg: str, method: str, line: int) -> str:
    """The remark of a 4.9.8 refusal: the exception, then the frame that threw it."""
    return f"{_EXC}{msg}{_AT}{method}(PlainPermissionManager.java:{line})"


def parse_perm(text: str | None) -> int:
    """``Permission.parsePermFromString``: anything unknown, or nothing, is DENY."""
    return DENY if text is None else _PERMS.get(str(text).strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


# -- IP whitelists (RemoteAddressStrategyFactory) -----------------------------------------------

_Match = Callable[[str], bool]


def _never(ip: str) -> bool:
    return False


def _always(ip: str) -> bool:
    return True


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def _range_matcher(pattern: str) -> _Match:
    """``a.b.c.*``, ``a.b.*.*``, ``a.b.c.10-20`` (IPv4): fixed leading parts, one range, then ``*``s."""
    parts = [p.strip() for p in pattern.split(".")]
    if len(parts) != 4:
        raise ValueError(f"bad address range {pattern!r}")
    bounds: list[tuple[int, int]] = []
    for p in parts:
        if p == "*":
            bounds.append((0, 255))
        elif "-" in p:
            lo, _, hi = p.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or not 0 <= int(lo) <= int(hi) <= 255:
                raise ValueError(f"bad address range {pattern!r}")
            bounds.append((int(lo), int(hi)))
        elif p.isdigit() and 0 <= int(p) <= 255:
            bounds.append((int(p), int(p)))
        else:
            raise ValueError(f"bad address range {pattern!r}")

    def match(ip: str) -> bool:
        octets = ip.split(".")
        if len(octets) != 4 or not all(o.isdigit() for o in octets):
            return False
        return all(lo <= int(o) <= hi for o, (lo, hi) in zip(octets, bounds, strict=True))

    return match


def address_matcher(pattern: str | None) -> _Match:
    """A predicate on the peer's IP for a ``whiteRemoteAddress`` pattern (blank: matches nothing)."""
    text = (pattern or "").strip()
    if not text:
        return _never
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if text.endswith("}"):  # 192.168.1.{1,2,3}
        head, _, tail = text.rpartition(".")
        if not tail.startswith("{"):
            raise ValueError(f"bad address set {text!r}")
        allowed = {f"{head}.{x.strip()}" for x in tail[1:-1].split(",")}
        for ip in allowed:
            ipaddress.ip_address(ip)
        return lambda ip: ip in allowed
    if "," in text:
        items = [x.strip() for x in text.split(",")]
        for ip in items:
            ipaddress.ip_address(ip)
        return lambda ip: any(_same_ip(ip, x) for x in items)
    if "*" in text or "-" in text:
        return _range_matcher(text)
    ipaddress.ip_address(text)  # ValueError if not an address
    return lambda ip: _same_ip(ip, text)


# -- configuration ------------------------------------------------------------------------------


def _str_list(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    return tuple(str(x) for x in v)


def _parse_resource_perms(items: Iterable[str], what: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, perm = item.partition("=")
        if not sep or not name.strip() or "=" in perm:
            raise ValueError(f"bad {what} permission {item!r}: expected Name=PUB|SUB|PUB|SUB|DENY")
        out[name.strip()] = parse_perm(perm)
    return out


@dataclass(frozen=True)
class Account:
    """One ``accounts`` entry of ``plain_acl.yml``. The repr never shows the secret key."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] = ()
    group_perms: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # PlainPermissionManager.checkPlainAccessConfig (without echoing the secret, as Java does)
        if len(self.access_key) <= 6 or len(self.secret_key) <= 6:
            raise ValueError(
                f"account {self.access_key!r}: the access key and the secret key must be longer than 6"
            )
        object.__setattr__(self, "topic_perms", _str_list(self.topic_perms))
        object.__setattr__(self, "group_perms", _str_list(self.group_perms))
        _parse_resource_perms(self.topic_perms, "topic")
        _parse_resource_perms(self.group_perms, "group")
        address_matcher(self.white_remote_address)


@dataclass(frozen=True)
class AclConfig:
    """The accounts and the global IP whitelist: ``plain_acl.yml`` as data."""

    accounts: tuple[Account, ...] = ()
    global_white_remote_addresses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "accounts", tuple(self.accounts))
        white = _str_list(self.global_white_remote_addresses)
        object.__setattr__(self, "global_white_remote_addresses", white)
        for pattern in self.global_white_remote_addresses:
            address_matcher(pattern)
        keys = [a.access_key for a in self.accounts]
        if len(set(keys)) != len(keys):
            raise ValueError("an access key is listed twice")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AclConfig:
        """From the parsed ``plain_acl.yml`` (its camelCase keys)."""
        accounts = []
        for a in data.get("accounts") or ():
            accounts.append(
                Account(
                    access_key=str(a.get("accessKey") or ""),
                    secret_key=str(a.get("secretKey") or ""),
                    white_remote_address=(
                        None if a.get("whiteRemoteAddress") is None else str(a["whiteRemoteAddress"])
                    ),
                    admin=bool(a.get("admin", False)),
                    default_topic_perm=a.get("defaultTopicPerm"),
                    default_group_perm=a.get("defaultGroupPerm"),
                    topic_perms=_str_list(a.get("topicPerms")),
                    group_perms=_str_list(a.get("groupPerms")),
                )
            )
        return cls(tuple(accounts), _str_list(data.get("globalWhiteRemoteAddresses")))

    @classmethod
    def from_yaml(cls, text: str) -> AclConfig:
        """Parse the text of a ``plain_acl.yml``."""
        import yaml  # type: ignore[import-untyped, unused-ignore]  # the embedded broker's only PyYAML use

        data = yaml.safe_load(text) or {}
        if not isinstance(data, Mapping):
            raise ValueError("an ACL file must hold a mapping (globalWhiteRemoteAddresses, accounts)")
        return cls.from_mapping(data)

    @classmethod
    def load(cls, path: str | Path) -> AclConfig:
        """Read a ``plain_acl.yml`` file."""
        return cls.from_yaml(Path(path).read_text(encoding="utf-8"))

    @classmethod
    def coerce(cls, acl: AclConfig | Mapping[str, Any] | str | Path) -> AclConfig:
        """An AclConfig, a parsed ``plain_acl.yml`` mapping, or the path of such a file."""
        if isinstance(acl, AclConfig):
            return acl
        if isinstance(acl, Mapping):
            return cls.from_mapping(acl)
        return cls.load(acl)

    def to_mapping(self) -> dict[str, Any]:
        """The ``plain_acl.yml`` mapping of this configuration (secrets included: not for logs)."""
        accounts = []
        for a in self.accounts:
            d: dict[str, Any] = {"accessKey": a.access_key, "secretKey": a.secret_key, "admin": a.admin}
            if a.white_remote_address is not None:
                d["whiteRemoteAddress"] = a.white_remote_address
            if a.default_topic_perm is not None:
                d["defaultTopicPerm"] = a.default_topic_perm
            if a.default_group_perm is not None:
                d["defaultGroupPerm"] = a.default_group_perm
            d["topicPerms"] = list(a.topic_perms)
            d["groupPerms"] = list(a.group_perms)
            accounts.append(d)
        return {"globalWhiteRemoteAddresses": list(self.global_white_remote_addresses), "accounts": accounts}

    def account(self, access_key: str) -> Account | None:
        for a in self.accounts:
            if a.access_key == access_key:
                return a
        return None

    def admin_account(self) -> Account | None:
        """An admin account (the embedded cluster's own admin requests are signed with it)."""
        return next((a for a in self.accounts if a.admin), None)


# -- resources a request needs ------------------------------------------------------------------


def _retry(group: str | None) -> str | None:
    return None if group is None else RETRY + group


def _heartbeat_consumers(body: bytes) -> list[tuple[str, list[str]]]:
    data = loads(body) if body else {}
    out = []
    for c in data.get("consumerDataSet") or ():
        topics = [str(s.get("topic")) for s in c.get("subscriptionDataSet") or () if s.get("topic")]
        out.append((str(c.get("groupName")), topics))
    return out


def _send4(add: Callable[[str | None, int], None], topic: str | None, group: str | None) -> None:
    if topic is not None and topic.startswith(RETRY):
        add(_retry(group), SUB)  # a send to a retry topic needs the group's SUB
    else:
        add(topic, PUB)


def needs4(code: int, ext: Mapping[str, str], body: bytes) -> dict[str, int]:
    """``PlainAccessValidator.parse`` (4.9.8): resource -> permission (``%RETRY%g`` for group ``g``)."""
    need: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            need[resource] = perm

    if code == RequestCode.SEND_MESSAGE:
        _send4(add, ext.get("topic"), ext.get("group"))
    elif code == RequestCode.SEND_MESSAGE_V2:
        _send4(add, ext.get("b"), ext.get("a"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(ext.get("group")), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        add(ext.get("topic"), SUB)
        add(_retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        for group, topics in _heartbeat_consumers(body):
            add(_retry(group), SUB)
            for t in topics:
                add(t, SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add(_retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        add(_retry(ext.get("consumerGroup")), SUB)
        add(ext.get("topic"), SUB)
    return need


#: 5.x resources: ("Topic" | "Group", name, the actions any of which a policy entry must allow)
Need5 = tuple[str, str, tuple[str, ...]]
_SUB, _PUB, _SUB_GET, _SUB_UPDATE = ("SUB",), ("PUB",), ("SUB", "GET"), ("SUB", "UPDATE")


def _group5(name: str) -> str:
    if name.startswith(RETRY):  # Resource.ofGroup: the retry topic's group
        name = name[len(RETRY) :]
    return name


def _mq_topics(body: bytes) -> tuple[str | None, list[str]]:
    data = loads(body) if body else {}
    topics = [str(mq.get("topic")) for mq in data.get("mqSet") or () if mq.get("topic")]
    return data.get("consumerGroup"), topics


def needs5(code: int, ext: Mapping[str, str], body: bytes) -> list[Need5]:
    """``DefaultAuthorizationContextBuilder`` (5.3.3, remoting): what a request must be allowed."""
    out: list[Need5] = []

    def topic(name: str | None, actions: tuple[str, ...]) -> None:
        if name and not name.startswith(RETRY):
            out.append(("Topic", name, actions))

    def group(name: str | None, actions: tuple[str, ...]) -> None:
        if name:
            out.append(("Group", _group5(name), actions))

    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        t = ext.get("topic" if code == RequestCode.SEND_MESSAGE else "b")
        g = ext.get("group" if code == RequestCode.SEND_MESSAGE else "a")
        if t and t.startswith(RETRY):
            group(g or t, _SUB)
        else:
            out.append(("Topic", t or "", _PUB))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        group(ext.get("group"), _SUB)
    elif code == RequestCode.PULL_MESSAGE:
        topic(ext.get("topic"), _SUB)
        group(ext.get("consumerGroup"), _SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        out.append(("Topic", ext.get("topic") or "", _SUB_GET))
    elif code == RequestCode.HEART_BEAT:
        for g, topics in _heartbeat_consumers(body):
            group(g, _SUB)
            for t in topics:
                topic(t, _SUB)
    elif code == RequestCode.UNREGISTER_CLIENT:
        group(ext.get("consumerGroup"), _SUB)
    elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
        group(ext.get("consumerGroup"), _SUB_GET)
    elif code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
        actions = _SUB_GET if code == RequestCode.QUERY_CONSUMER_OFFSET else _SUB_UPDATE
        topic(ext.get("topic"), actions)
        group(ext.get("consumerGroup"), actions)
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        g, topics = _mq_topics(body)
        group(g, _SUB)
        for t in topics:
            topic(t, _SUB)
    elif code in (17, 215):  # create / delete topic
        out.append(("Topic", ext.get("topic") or "", ("CREATE",) if code == 17 else ("DELETE",)))
    elif code in (200, 207):  # create / delete subscription group
        out.append(("Group", ext.get("groupName") or "", ("CREATE",) if code == 200 else ("DELETE",)))
    return out


# -- the checker --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Owned:
    """An account as the broker holds it (``PlainAccessResource``)."""

    account: Account
    white: _Match
    perms: dict[str, int]  # topic, or %RETRY%group -> perm (4.x)
    default_topic: int
    default_group: int
    # 5.x policies: (type, name or None for any) -> (actions, deny)
    custom: dict[tuple[str, str], tuple[frozenset[str], bool]]
    defaults: dict[str, tuple[frozenset[str], bool]]


def _actions(perm: str | None) -> tuple[frozenset[str], bool]:
    """``AuthMigrator.parseActions`` / ``parseDecision``: (actions, deny)."""
    text = (perm or "").strip()
    if text == "DENY" or not text:
        return frozenset({"ALL"}), True
    acts = {"PUB": {"PUB"}, "SUB": {"SUB"}, "PUB|SUB": {"PUB", "SUB"}, "SUB|PUB": {"PUB", "SUB"}}
    return frozenset(acts.get(text, set())), False


def _owned(a: Account) -> _Owned:
    perms = _parse_resource_perms(a.group_perms, "group")
    perms = {RETRY + g: p for g, p in perms.items()}
    perms.update(_parse_resource_perms(a.topic_perms, "topic"))
    custom: dict[tuple[str, str], tuple[frozenset[str], bool]] = {}
    for kind, items in (("Topic", a.topic_perms), ("Group", a.group_perms)):
        for item in items:
            name, _, perm = item.partition("=")
            custom[(kind, name.strip())] = _actions(perm)
    defaults = {}
    if (a.default_topic_perm or "").strip():
        defaults["Topic"] = _actions(a.default_topic_perm)
    if (a.default_group_perm or "").strip():
        defaults["Group"] = _actions(a.default_group_perm)
    return _Owned(
        a,
        address_matcher(a.white_remote_address),
        perms,
        parse_perm(a.default_topic_perm),
        parse_perm(a.default_group_perm),
        custom,
        defaults,
    )


def _allows(entry: tuple[frozenset[str], bool], actions: tuple[str, ...]) -> bool | None:
    """None: the policy entry does not match the actions; else whether it allows (False: deny)."""
    acts, deny = entry
    if not acts or not ("ALL" in acts or any(x in acts for x in actions)):
        return None
    return not deny


class AclChecker:
    """Decides requests for one broker; ``flavour`` 4 (4.9.8, ACL 1.0) or 5 (5.3.3, ACL 2.0)."""

    def __init__(self, config: AclConfig, flavour: int = 4) -> None:
        self.flavour = flavour
        self.update(config)

    def update(self, config: AclConfig) -> None:
        """Use ``config`` from the next request on (the real broker reloads a changed file alike)."""
        self.config = config
        self._global_white = [address_matcher(p) for p in config.global_white_remote_addresses]
        self._accounts = {a.access_key: _owned(a) for a in config.accounts}

    def check(self, cmd: RemotingCommand, ip: str) -> tuple[int, str] | None:
        """The refusal of ``cmd`` from ``ip`` as (response code, remark), or None when it may pass."""
        try:
            return self._check5(cmd, ip) if self.flavour == 5 else self._check4(cmd, ip)
        except (ValueError, TypeError, AttributeError) as exc:  # an undecodable heartbeat/lock body
            if self.flavour == 5:
                return ResponseCode.NO_PERMISSION, "parse authorization context error."
            return ResponseCode.SYSTEM_ERROR, f"{_EXC}{exc}"

    # 4.9.8 ----------------------------------------------------------------------------------------

    def _check4(self, cmd: RemotingCommand, ip: str) -> tuple[int, str] | None:
        ext = cmd.ext_fields
        need = needs4(cmd.code, ext, cmd.body)
        if any(m(ip) for m in self._global_white):
            return None
        ak = ext.get(ACCESS_KEY)
        if ak is None:
            return ResponseCode.SYSTEM_ERROR, _remark4("No accessKey is configured", "validate", 664)
        owned = self._accounts.get(ak)
        if owned is None:
            return ResponseCode.SYSTEM_ERROR, _remark4(f"No acl config for {ak}", "validate", 668)
        if owned.white(ip):
            return None
        if not verify(ext, cmd.body, owned.account.secret_key):
            msg = f"Check signature failed for accessKey={ak}"
            return ResponseCode.SYSTEM_ERROR, _remark4(msg, "validate", 684)
        if need.get(TRACE_TOPIC) == PUB:
            return None
        return self._check_perm4(cmd.code, need, owned)

    @staticmethod
    def _check_perm4(code: int, need: dict[str, int], owned: _Owned) -> tuple[int, str] | None:
        account = owned.account
        if code in ADMIN_CODES and not account.admin:
            msg = f"Need admin permission for request code={code}, but accessKey={account.access_key} is not"
            return ResponseCode.SYSTEM_ERROR, _remark4(msg, "checkPerm", 581)
        if not need or (not owned.perms and account.admin):
            return None
        # the broker walks a HashMap: the first refused resource in its order is the one named
        order = java_map_order({r: str(p) for r, p in need.items()})
        for resource in order:
            is_group = resource.startswith(RETRY)
            printed = f"group:{resource[len(RETRY) :]}" if is_group else f"topic:{resource}"
            if resource not in owned.perms:
                default = owned.default_group if is_group else owned.default_topic
                if not check_permission(need[resource], default):
                    msg = f"No default permission for {printed}"
                    return ResponseCode.SYSTEM_ERROR, _remark4(msg, "checkPerm", 606)
            elif not check_permission(need[resource], owned.perms[resource]):
                msg = f"No default permission for {printed}"
                return ResponseCode.SYSTEM_ERROR, _remark4(msg, "checkPerm", 611)
        return None

    # 5.3.3 ----------------------------------------------------------------------------------------

    def _check5(self, cmd: RemotingCommand, ip: str) -> tuple[int, str] | None:
        ext = cmd.ext_fields
        ak = ext.get(ACCESS_KEY) if ext else None
        if not ak:
            return ResponseCode.NO_PERMISSION, "username cannot be null."
        owned = self._accounts.get(ak)
        if owned is None:
            return ResponseCode.NO_PERMISSION, f"User:{ak} is not found."
        if SIGNATURE not in ext or not verify(
            ext, cmd.body, owned.account.secret_key, request_version=cmd.version
        ):
            return ResponseCode.NO_PERMISSION, "check signature failed."
        if owned.account.admin:  # a super user is not authorized
            return None
        for kind, name, actions in needs5(cmd.code, ext, cmd.body):
            decision = None
            entry = owned.custom.get((kind, name))
            if entry is not None:
                decision = _allows(entry, actions)
            if decision is None and kind in owned.defaults:
                decision = _allows(owned.defaults[kind], actions)
            if decision is not True:
                detail = "no matched policies." if decision is None else "the decision is deny."
                remark = f"User:{ak} has no permission to access {kind}:{name} from {ip}, {detail}"
                return ResponseCode.NO_PERMISSION, remark
        return None


Handle = Callable[[Connection, RemotingCommand], Reply]


def guard(handle: Handle, checker: AclChecker, version: int) -> Handle:
    """``handle`` behind the ACL check: a refused request gets the refusal (a oneway: nothing)."""
    check = checker.check

    def guarded(conn: Connection, cmd: RemotingCommand) -> Reply:
        refusal = check(cmd, conn.ip)
        if refusal is None:
            return handle(conn, cmd)
        code, remark = refusal
        # the real broker answers a refusal in JSON even to a ROCKETMQ-header request (acl-binary seq 16)
        resp = error_response(cmd, code, remark, version=version)
        resp.serialize_type = type(resp.serialize_type).JSON
        return resp

    return guarded
