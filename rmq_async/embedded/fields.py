"""Reading request header fields (``extFields``) the way ``decodeCommandCustomHeader`` does.

Strategy: every value travels as a string; a missing required field or a value that does not parse
raises :class:`HeaderError`, which the server answers with code 1 and a remark naming the field
(the Java broker answers code 1 with the exception text), and the connection stays open.
"""

from __future__ import annotations

from ..protocol.command import RemotingCommand
from .server import HeaderError

__all__ = ["opt_bool", "opt_int", "opt_str", "req_int", "req_str"]


def req_str(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise HeaderError(f"the custom field <{name}> is null")
    return value


def opt_str(cmd: RemotingCommand, name: str) -> str | None:
    return cmd.ext_fields.get(name)


def _parse_int(name: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise HeaderError(f"the custom field <{name}> has a bad value {value!r}: not an integer") from None


def req_int(cmd: RemotingCommand, name: str) -> int:
    return _parse_int(name, req_str(cmd, name))


def opt_int(cmd: RemotingCommand, name: str, default: int | None = None) -> int | None:
    value = cmd.ext_fields.get(name)
    if value is None or value == "":
        return default
    return _parse_int(name, value)


def opt_bool(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    """``Boolean.parseBoolean``: only "true" (any case) is true."""
    value = cmd.ext_fields.get(name)
    if value is None:
        return default
    return value.strip().lower() == "true"
