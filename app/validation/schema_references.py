"""The references of a job's schema (``$ref``, ``$dynamicRef``), checked at registration.

Two ways a reference makes a schema unusable: it does not resolve within the schema (or the
JSON Schema metaschemas: nothing is ever fetched from elsewhere), or it leads back to a
schema it was reached from without descending into the payload (``{"$ref": "#"}``,
``{"if": {"$ref": "#"}}``): validating would recurse without end, on every submit.
A reference under ``properties``, ``items`` and the like descends first, so a recursive
schema for a tree is fine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from taskhub.validation.schema_validator import INSTANCE_KEYWORDS

if TYPE_CHECKING:
    from referencing._core import Resolver  # not exported by the package itself

REFERENCES = ("$ref", "$dynamicRef")
# Keywords that apply their subschemas to the same instance (not to a part of it).
_SAME_INSTANCE_ONE = ("not", "if", "then", "else")
_SAME_INSTANCE_LISTS = ("allOf", "anyOf", "oneOf")
_SAME_INSTANCE_MAPS = ("dependentSchemas",)
Path = list[str | int]


def schemas_with_resolvers(
    node: Any, resolver: Resolver[Any], path: Path
) -> Iterator[tuple[dict[str, Any], Resolver[Any], Path]]:
    """Every schema object within ``node`` (a schema or a list of them), with the resolver
    of its enclosing ``$id`` and its path; instance values (``const``, ``enum`` …) are
    data and left out."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from schemas_with_resolvers(item, resolver, [*path, index])
        return
    if not isinstance(node, dict):
        return
    resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
    yield node, resolver, path
    for key, value in node.items():
        if key not in INSTANCE_KEYWORDS and key not in REFERENCES:
            yield from schemas_with_resolvers(value, resolver, [*path, key])


def unresolved_references(schema: Any, resolver: Resolver[Any]) -> Iterator[tuple[Path, str]]:
    """``(path, reference)`` for each reference that does not resolve."""
    for node, scoped, path in schemas_with_resolvers(schema, resolver, []):
        for key in REFERENCES:
            if isinstance(node.get(key), str):
                try:
                    scoped.lookup(node[key])
                except Unresolvable:
                    yield [*path, key], node[key]


def endless_references(schema: Any, resolver: Resolver[Any]) -> list[Path]:
    """The paths of references that close a loop on the same instance (call only once every
    reference resolves)."""
    nodes = list(schemas_with_resolvers(schema, resolver, []))
    search = _LoopSearch({id(node): path for node, _scoped, path in nodes})
    for node, scoped, path in nodes:
        search.visit(node, scoped, path)
    return search.loops


class _LoopSearch:
    """Depth-first along the same-instance applicators; a schema met again while still
    under way closes a loop, reported at the reference (or keyword) that reached it."""

    def __init__(self, paths: dict[int, Path]) -> None:
        self.paths = paths  # where each schema object of the job's schema is
        self.loops: list[Path] = []
        self._under_way: set[int] = set()
        self._safe: set[int] = set()  # no loop is reachable from these

    def visit(self, node: Any, resolver: Resolver[Any], reached_by: Path) -> None:
        if not isinstance(node, dict) or id(node) in self._safe:
            return
        if id(node) in self._under_way:
            self.loops.append(reached_by)
            return
        self._under_way.add(id(node))
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        here = self.paths.get(id(node), [])  # a metaschema's own schemas have no path
        for child, child_resolver, keys in same_instance_children(node, resolver):
            self.visit(child, child_resolver, [*here, *keys])
        self._under_way.discard(id(node))
        self._safe.add(id(node))


def same_instance_children(
    node: dict[str, Any], resolver: Resolver[Any]
) -> Iterator[tuple[Any, Resolver[Any], Path]]:
    """``(subschema, its resolver, the keys leading to it from node)``."""
    for key in REFERENCES:
        if isinstance(node.get(key), str):
            resolved = resolver.lookup(node[key])
            yield resolved.contents, resolved.resolver, [key]
    for key in _SAME_INSTANCE_ONE:
        if key in node:
            yield node[key], resolver, [key]
    for key in _SAME_INSTANCE_LISTS:
        if isinstance(node.get(key), list):
            for index, child in enumerate(node[key]):
                yield child, resolver, [key, index]
    for key in _SAME_INSTANCE_MAPS:
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                yield child, resolver, [key, name]
