"""Makes the `cluster` fixture (harness.py) available to the tests in this folder."""

from .harness import cluster  # noqa: F401
