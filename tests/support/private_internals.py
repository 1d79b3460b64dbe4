"""Canaries for the private internals of libraries that Taskhub overrides or calls.

A library may change a private method in any release. Each such name Taskhub relies on is
one ``Internal`` in a table of the test module that mirrors the code using it; the test
checks that the library class still has it, with the parameters the override was written
against (names, kinds and defaults; annotations are ignored). ``check_no_shadowing`` checks
the other way round: a private name that a Taskhub subclass defines for itself must not
exist in the library, or it silently replaces the library's own.
"""

from __future__ import annotations

import inspect
import re
import tomllib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@dataclass(frozen=True)
class Internal:
    """A private name of ``owner`` (a library class) that Taskhub relies on.

    ``parameters``: its signature without annotations, e.g. ``"(self, data)"``; ``None``
    for an attribute (a slot, a class attribute) that only has to be there.
    ``distribution``: the PyPI distribution that ships it (whose pin guards it).
    ``used_by``: where and how Taskhub uses it, said in the failure message."""

    owner: type
    name: str
    parameters: str | None
    distribution: str
    used_by: str

    def label(self) -> str:
        return f"{self.owner.__name__}.{self.name}"


def bare_signature(function: Any) -> str:
    """``function``'s signature as names, kinds and defaults (annotations dropped)."""
    signature = inspect.signature(function)
    parameters = [
        p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
    ]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def _upgrade(internal: Internal) -> str:
    return (
        f"{internal.distribution} {version(internal.distribution)}: "
        f"{internal.owner.__module__}.{internal.label()}"
    )


def check(internal: Internal) -> None:
    """Fails, saying which upgrade changed what, unless ``internal`` is as expected."""
    found = inspect.getattr_static(internal.owner, internal.name, None)
    assert found is not None, (
        f"{_upgrade(internal)} is gone. Taskhub relies on it: {internal.used_by}. Adapt that "
        f"code to this {internal.distribution}, or keep the pin in pyproject.toml below it."
    )
    if internal.parameters is None:
        return
    function = getattr(internal.owner, internal.name)
    assert callable(function), f"{_upgrade(internal)} is no longer a method"
    actual = bare_signature(function)
    assert actual == internal.parameters, (
        f"{_upgrade(internal)} now takes {actual}, not {internal.parameters}. Taskhub relies "
        f"on it: {internal.used_by}. Re-read the library's new code, adapt the override, then "
        f"update this entry and the pin in pyproject.toml."
    )


def check_no_shadowing(subclass: type, intended: set[str]) -> None:
    """Every private name ``subclass`` defines is either an ``intended`` override or absent
    from its library base classes (else the library's own is replaced unawares)."""
    ours = {
        name
        for name in vars(subclass)
        if name.startswith("_") and not name.startswith("__") and not name.startswith("_abc_")
    }
    for name in sorted(ours - intended):
        owners = [base for base in subclass.__mro__[1:] if name in vars(base)]
        assert not owners, (
            f"{owners[0].__module__}.{owners[0].__qualname__} now has a {name} of its own, "
            f"which {subclass.__qualname__}.{name} (Taskhub's, not meant as an override) "
            f"replaces: rename Taskhub's, or make it an intended override with a canary."
        )


def pinned_range(distribution: str) -> SpecifierSet:
    """The version range of ``distribution`` in the server extra of pyproject.toml."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    for line in project["optional-dependencies"]["server"]:
        requirement = Requirement(line)
        if requirement.name == distribution:
            return requirement.specifier
    raise AssertionError(f"{distribution} has no pin in the server extra of pyproject.toml")


def check_pin(distribution: str, tested: str) -> None:
    """pyproject.toml pins ``distribution`` to ``tested`` (the range whose internals the
    canaries were written for), and the installed version is in it."""
    pin = pinned_range(distribution)
    assert pin == SpecifierSet(tested), (
        f"pyproject.toml pins {distribution}{pin}, but its internals were tested for "
        f"{tested}: run these canaries on the new range, then update the tested range"
    )
    installed = Version(version(distribution))
    assert installed in pin, f"{distribution} {installed} is installed, outside the tested {pin}"


def installed(distribution: str) -> str:
    """``distribution`` and its installed version, e.g. ``python-engineio 4.15.1``: the
    upgrade a behavioural canary's failure message names."""
    return f"{distribution} {version(distribution)}"


def attribute_calls(module: ModuleType, attribute: str) -> dict[str, list[str]]:
    """The methods called on ``<something>.<attribute>`` in ``module``'s source, each with
    the places (``file:line``) that call it: what a library asks of an object Taskhub
    hands it (e.g. each Engine.IO session's ``queue``)."""
    calls: dict[str, list[str]] = {}
    source = inspect.getsource(module)
    where = Path(inspect.getfile(module)).name
    pattern = re.compile(rf"\.{re.escape(attribute)}\.(\w+)\s*\(")
    for number, line in enumerate(source.splitlines(), start=1):
        for name in pattern.findall(line):
            calls.setdefault(name, []).append(f"{module.__name__} ({where}:{number})")
    return calls


def bare_uses(module: ModuleType, attribute: str) -> list[str]:
    """The lines of ``module`` that use ``<something>.<attribute>`` other than by calling a
    method of it (passing it on, replacing it): uses ``attribute_calls`` cannot see."""
    pattern = re.compile(rf"\.{re.escape(attribute)}\b(?!\.\w+\s*\()")
    return [
        f"{module.__name__}:{number}: {line.strip()}"
        for number, line in enumerate(inspect.getsource(module).splitlines(), start=1)
        if pattern.search(line)
    ]
