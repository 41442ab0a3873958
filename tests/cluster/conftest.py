"""Makes the `cluster` fixture (harness.py) available to the tests in this folder."""

import pytest

from .harness import cluster  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """The long run's hard stop follows its length (--long-seconds), over the suite's 600 s."""
    for item in items:
        if item.name.startswith("test_long_randomized"):
            item.add_marker(pytest.mark.timeout(int(config.getoption("--long-seconds") * 2 + 900)))
