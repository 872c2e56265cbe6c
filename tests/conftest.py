"""Shared pytest configuration.

Under CI (``CI=true``) hypothesis runs derandomized, so a CI run is
reproducible: the same examples every time.  Locally it explores new random
examples each run (and saves failures in ``.hypothesis/``).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")
