"""Who a certificate names: ``<kind>:<name>`` in its common name.

Kinds: ``node`` (an agent), ``user`` and ``admin`` (people), ``controller`` (the server).
User and node names are short and from a small alphabet, so a name can never hold a colon
and one kind can never pass for another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NODE = "node"
USER = "user"
ADMIN = "admin"
CONTROLLER = "controller"
KINDS = (NODE, USER, ADMIN, CONTROLLER)
PERSON_KINDS = (USER, ADMIN)

MAX_NAME_LEN = 64
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


class NameError_(ValueError):
    """A user or node name that may not be certified."""


@dataclass(frozen=True)
class Identity:
    kind: str
    name: str

    @property
    def is_admin(self) -> bool:
        return self.kind == ADMIN

    @property
    def is_person(self) -> bool:
        return self.kind in PERSON_KINDS

    def common_name(self) -> str:
        return f"{self.kind}:{self.name}"


def check_name(name: str, what: str = "name") -> str:
    """``name`` when it may be certified; else NameError_ saying why."""
    if not name or len(name) > MAX_NAME_LEN:
        raise NameError_(f"a {what} must be 1 to {MAX_NAME_LEN} characters (got {len(name)})")
    if not _NAME.match(name):
        raise NameError_(
            f"a {what} may hold only letters, digits, '_', '.' and '-' and must not start"
            f" with '.' or '-': {name!r}"
        )
    return name


def identity(kind: str, name: str) -> Identity:
    if kind not in KINDS:
        raise NameError_(f"unknown identity kind {kind!r}")
    return Identity(kind, check_name(name, f"{kind} name"))


def parse_common_name(common_name: str) -> Identity | None:
    """The identity a certificate's common name states; None when it states none."""
    kind, sep, name = common_name.partition(":")
    if not sep:
        return None
    try:
        return identity(kind, name)
    except NameError_:
        return None
