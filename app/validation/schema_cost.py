"""How much work a job's schema can make of validating one payload value, checked at
registration.

Validation applies a schema to a value, then its same-instance subschemas (``allOf``,
``anyOf``, ``$ref`` …) to that value and its descending ones (``properties``, ``items`` …) to
the value's parts. A schema of a few hundred bytes whose references fan out — each level an
``anyOf`` of two references to the next — applies 2ⁿ subschemas to one value, and one whose
``allOf`` of two references descends back into itself doubles at every level of the
payload: any submit would hold the event loop for hours. ``applications_per_value`` bounds,
for every depth of a payload up to ``MAX_PAYLOAD_DEPTH``, how many subschemas one value at
that depth can have applied to it; registration refuses a schema over
``MAX_APPLICATIONS_PER_VALUE`` (real schemas apply a handful; the JSON Schema metaschema,
a dozen).

Call it only once every reference resolves and none loops on the same instance
(``schema_references``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from referencing.jsonschema import DRAFT202012

from taskhub.validation.schema_references import same_instance_children

if TYPE_CHECKING:
    from referencing._core import Resolver

MAX_APPLICATIONS_PER_VALUE = 1_000
# How deep a payload may nest objects and arrays (the REST layer refuses deeper bodies).
MAX_PAYLOAD_DEPTH = 64
_OTHER = object()  # a key no ``properties`` names

# A schema object, the resolver of its scope, and how often it is applied to one value.
Member = tuple[Any, "Resolver[Any]", int]


class _TooMany(Exception):
    pass


def applications_per_value(schema: Any, resolver: Resolver[Any]) -> int:
    """The most subschemas validation can apply to one value of a payload, at any depth;
    counting stops past ``MAX_APPLICATIONS_PER_VALUE``."""
    count = _Count()
    heaviest = 0
    try:
        for depth in range(MAX_PAYLOAD_DEPTH + 1):
            load = count.at(schema, resolver, depth)
            heaviest = max(heaviest, load)
            if load == 0:
                break
    except _TooMany:
        return MAX_APPLICATIONS_PER_VALUE + 1
    return heaviest


class _Count:
    """``at(node, depth)``: how many subschemas applying ``node`` to a value applies to one
    of its parts ``depth`` levels down (0: to the value itself), an upper bound."""

    def __init__(self) -> None:
        self._closures: dict[int, dict[int, Member]] = {}
        self._loads: dict[tuple[int, int], int] = {}

    def closure(self, node: Any, resolver: Resolver[Any]) -> dict[int, Member]:
        """The schemas applied to the same value as ``node`` (itself included), by id, with
        how often; raises ``_TooMany`` past the bound."""
        known = self._closures.get(id(node))
        if known is not None:
            return known
        if not isinstance(node, dict):
            return {id(node): (node, resolver, 1)}
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        members: dict[int, Member] = {id(node): (node, resolver, 1)}
        total = 1
        for child, child_resolver, _keys in same_instance_children(node, resolver):
            for key, (schema, scoped, times) in self.closure(child, child_resolver).items():
                _, _, before = members.get(key, (schema, scoped, 0))
                members[key] = (schema, scoped, before + times)
                total += times
                if total > MAX_APPLICATIONS_PER_VALUE:
                    raise _TooMany
        self._closures[id(node)] = members
        return members

    def at(self, node: Any, resolver: Resolver[Any], depth: int) -> int:
        key = (id(node), depth)
        known = self._loads.get(key)
        if known is not None:
            return known
        members = self.closure(node, resolver).values()
        if depth == 0:
            load = sum(times for _schema, _scoped, times in members)
        else:
            load = max(self._in_object(members, depth - 1), self._in_array(members, depth - 1))
        if load > MAX_APPLICATIONS_PER_VALUE:
            raise _TooMany
        self._loads[key] = load
        return load

    def _in_object(self, members: Any, depth: int) -> int:
        """The most that one property of an object (or one of its keys) gets."""
        named_anywhere = {
            name
            for schema, _r, _t in members
            if _mapped(schema, "properties")
            for name in schema["properties"]
        }
        slots = dict.fromkeys([*named_anywhere, _OTHER], 0)
        names = 0
        for schema, scoped, times in members:
            if not isinstance(schema, dict):
                continue
            named = schema["properties"] if _mapped(schema, "properties") else {}
            every = sum(
                self.at(sub, scoped, depth)
                for sub in [
                    *(
                        schema["patternProperties"].values()
                        if _mapped(schema, "patternProperties")
                        else ()
                    ),
                    *(
                        [schema["unevaluatedProperties"]]
                        if "unevaluatedProperties" in schema
                        else ()
                    ),
                ]
            )
            extra = (
                self.at(schema["additionalProperties"], scoped, depth)
                if "additionalProperties" in schema
                else 0
            )
            for slot in slots:
                own = self.at(named[slot], scoped, depth) if slot in named else extra
                slots[slot] += times * (own + every)
            if "propertyNames" in schema:
                names += times * self.at(schema["propertyNames"], scoped, depth)
        return max(*slots.values(), names)

    def _in_array(self, members: Any, depth: int) -> int:
        """The most that one item of an array gets."""
        longest = max(
            (len(s["prefixItems"]) for s, _r, _t in members if _listed(s, "prefixItems")),
            default=0,
        )
        slots = [0] * (longest + 1)  # each prefix index, then every later item
        for schema, scoped, times in members:
            if not isinstance(schema, dict):
                continue
            prefix = schema["prefixItems"] if _listed(schema, "prefixItems") else []
            rest = self.at(schema["items"], scoped, depth) if "items" in schema else 0
            every = sum(
                self.at(schema[name], scoped, depth)
                for name in ("contains", "unevaluatedItems")
                if name in schema
            )
            for index in range(longest + 1):
                own = self.at(prefix[index], scoped, depth) if index < len(prefix) else rest
                slots[index] += times * (own + every)
        return max(slots)


def _listed(schema: Any, name: str) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get(name), list)


def _mapped(schema: Any, name: str) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get(name), dict)
