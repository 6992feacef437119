"""The opening every optional mapping section of a job spec shares (``mlfs``, ``elastic``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple


class FieldDoc(NamedTuple):
    """What docs/spec-reference.md says of one field (``python -m mlsched.spec_reference``)."""

    type: str  # the YAML type and the values or range the parser accepts
    default: str  # what an absent field means ("required" when it must be given)
    meaning: str


def open_section(
    name: str, value: Any, fields: Sequence[str], problems: list[str]
) -> Mapping[str, Any] | None:
    """``value`` as a mapping to read fields from, with unknown fields reported in ``problems``;
    None when the section is absent or not a mapping (the latter reported too)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{name}: must be a mapping with fields {', '.join(fields)}")
        return None
    unknown = sorted(set(map(str, value)) - set(fields))
    if unknown:
        problems.append(
            f"{name}: unknown field(s): {', '.join(unknown)}; valid: {', '.join(fields)}"
        )
    return value
