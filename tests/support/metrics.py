"""Reading a ``/metrics`` exposition in tests: every sample by name and labels."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families


class Samples:
    """The samples of one scrape; a missing sample reads as ``None`` (``value``) or 0
    (``count``, for counters that may not have a series yet)."""

    def __init__(self, text: str) -> None:
        self.values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.names: set[str] = set()
        for family in text_string_to_metric_families(text):
            self.names.add(family.name)
            for sample in family.samples:
                self.values[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return self.values.get((name, frozenset((labels or {}).items())))

    def count(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        return self.value(name, labels) or 0.0

    def labelled(self, name: str, label: str) -> dict[str, float]:
        """``{label value: sample value}`` of every ``name`` sample."""
        return {
            dict(labels)[label]: value
            for (sample, labels), value in self.values.items()
            if sample == name and label in dict(labels)
        }
