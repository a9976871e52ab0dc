"""The names of the queue allocation strategies, as Java's ``AllocateMessageQueueStrategy.getName()``
returns them (they go on the wire in running info, ``allocateMessageQueueStrategy``), their friendly
aliases and the Java class names. Pure: ``config`` validates names with it, ``consumer/allocate.py``
builds the strategies from it.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["NAME_ONLY_STRATEGIES", "STRATEGY_NAMES", "canonical_strategy"]

#: the canonical names, in the order they are listed in errors
STRATEGY_NAMES = ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "MACHINE_ROOM", "MACHINE_ROOM_NEARBY")
#: the strategies a name alone builds (the others need arguments: pass a strategy object)
NAME_ONLY_STRATEGIES = frozenset({"AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"})

# Lower-case, '-' as '_': friendly aliases and the Java class names.
_ALIASES: dict[str, str] = {
    "avg": "AVG",
    "averagely": "AVG",
    "allocatemessagequeueaveragely": "AVG",
    "avg_by_circle": "AVG_BY_CIRCLE",
    "circle": "AVG_BY_CIRCLE",
    "averagely_by_circle": "AVG_BY_CIRCLE",
    "allocatemessagequeueaveragelybycircle": "AVG_BY_CIRCLE",
    "consistent_hash": "CONSISTENT_HASH",
    "allocatemessagequeueconsistenthash": "CONSISTENT_HASH",
    "config": "CONFIG",
    "by_config": "CONFIG",
    "allocatemessagequeuebyconfig": "CONFIG",
    "machine_room": "MACHINE_ROOM",
    "by_machine_room": "MACHINE_ROOM",
    "allocatemessagequeuebymachineroom": "MACHINE_ROOM",
    "machine_room_nearby": "MACHINE_ROOM_NEARBY",
    "allocatemachineroomnearby": "MACHINE_ROOM_NEARBY",
}

_NEARBY_PREFIX = "machine_room_nearby_"


def canonical_strategy(name: str) -> tuple[str, str | None]:
    """``(canonical name, inner name)`` of a strategy name or alias (case-insensitive, ``-`` and
    ``_`` alike); the inner name of ``MACHINE_ROOM_NEARBY-<inner>``, else None. Raises
    :class:`ConfigError` for an unknown name."""
    key = name.strip().lower().replace("-", "_")
    inner: str | None = None
    if key.startswith(_NEARBY_PREFIX) and key not in _ALIASES:
        inner = key[len(_NEARBY_PREFIX) :]
        if _ALIASES.get(inner, "MACHINE_ROOM_NEARBY") == "MACHINE_ROOM_NEARBY":
            raise ConfigError(f"unknown inner allocation strategy in {name!r}")
        key = "machine_room_nearby"
    canonical = _ALIASES.get(key)
    if canonical is None:
        known = ", ".join(STRATEGY_NAMES)
        raise ConfigError(f"unknown allocation strategy {name!r}; expected one of {known}")
    return canonical, inner
