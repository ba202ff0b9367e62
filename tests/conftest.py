"""Shared test settings.

Hypothesis runs derandomized and without per-example deadlines: CI machines have two
cores shared with subprocess-heavy tests, and a timing-dependent failure is not a finding.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("project", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("project")
