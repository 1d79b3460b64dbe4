"""The suite's Hypothesis profiles, and example counts that follow the loaded one.

``suite`` (loaded by tests/conftest.py unless ``--hypothesis-profile`` names another) runs
half of Hypothesis' default number of examples, with no deadline and no "too slow" health
check: a loaded machine slows every example down, which says nothing about the code. Runs
are not derandomized: each run draws other examples, so the runs of every change together
search further than one run could; a failure prints its ``@reproduce_failure`` blob.
``thorough`` runs ten times the default, for a hunt (``--hypothesis-profile thorough``).

A test that sets its own count (a state machine, a fuzzer costing a request per example)
gives it as ``examples(n)``: ``n`` at Hypothesis' default of 100 examples, scaled by the
profile loaded."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# The count the tests' own ``examples(n)`` figures are written against (Hypothesis' default).
DEFAULT_EXAMPLES = 100
PROFILES = {"suite": 50, "thorough": 1000}


def register_profiles() -> None:
    """Register ``suite`` and ``thorough`` and load ``suite`` (pytest's
    ``--hypothesis-profile``, applied later, overrides it)."""
    for name, max_examples in PROFILES.items():
        settings.register_profile(
            name,
            max_examples=max_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            print_blob=True,
        )
    settings.load_profile("suite")


def examples(count: int) -> int:
    """``count`` examples scaled by the loaded profile (``count`` at Hypothesis' default;
    at least one)."""
    return max(1, round(count * settings().max_examples / DEFAULT_EXAMPLES))
