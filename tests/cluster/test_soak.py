"""The long randomized fault run (soak.py) as a test, only with `--long` (out of CI):

    scripts/test --long -k soak                       # 10 minutes of faults, a random seed
    scripts/test --long --long-seconds 1800 --long-seed 42 -k soak

The seed is printed first (shown with -s or on failure); network faults are included when the
machine allows namespaces (root)."""

import os

import pytest

from . import soak
from .netns import unavailable


def test_long_randomized_fault_schedule_keeps_every_acknowledged_write(request):
    if not request.config.getoption("--long"):
        pytest.skip("the long randomized run needs --long")
    seconds = request.config.getoption("--long-seconds")
    args = ["--seconds", str(seconds), "--nodes", os.environ.get("SLUICE_SOAK_NODES", "3")]
    seed = request.config.getoption("--long-seed")
    if seed is not None:
        args += ["--seed", str(seed)]
    if os.geteuid() == 0 and unavailable() is None:
        args.append("--netns")
    assert soak.main(args) == 0, "the soak found anomalies or did not heal (its seed and findings are printed above)"
