"""Reading a /metrics scrape in tests: sample -> value."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by its name and its labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    """One sample's value (0 when the scrape lacks it: a counter not yet counted)."""
    return samples(text).get((name, frozenset(labels.items())), 0.0)
