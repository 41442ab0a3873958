"""The web console in headless Debian Chromium, driven by Playwright (ui.mjs), against a
running broker and a second cluster, with real Kafka clients producing and consuming in
between. Screenshots land in tests/artifacts/console/."""

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import ARTIFACTS

HERE = Path(__file__).parent


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def test_console_in_a_browser(start_broker):
    if not (HERE / "node_modules" / "playwright-core").exists() or not Path("/usr/bin/chromium").exists():
        pytest.fail("run scripts/console-env first (scripts/test does): it installs Chromium and playwright-core")
    first = start_broker(name="console-a")
    second = start_broker(name="console-b")
    assert post_json(second.admin_url + "/api/topics", {"name": "only-on-second", "partitions": 1}) == 201
    out = ARTIFACTS / "console"
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run(
        ["node", str(HERE / "ui.mjs"), first.admin_url, first.bootstrap, sys.executable, str(out), second.admin_url],
        cwd=HERE, capture_output=True, text=True, timeout=300, env={**os.environ, "NODE_NO_WARNINGS": "1"})
    print(run.stdout)
    print(run.stderr)
    assert run.returncode == 0, f"ui.mjs failed:\n{run.stdout}\n{run.stderr}"
    assert "console UI test passed" in run.stdout
    shots = sorted(p.name for p in out.glob("*.png"))
    assert len(shots) == 11, shots


def test_console_asks_for_the_admin_token(start_broker):
    token = "console-token-0123456789"
    b = start_broker(env={"SLUICE_ADMIN_TOKEN": token}, name="console-token")
    run = subprocess.run(["node", str(HERE / "token.mjs"), b.admin_url, token, str(ARTIFACTS / "console")],
                         cwd=HERE, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"token.mjs failed:\n{run.stdout}\n{run.stderr}"
    assert "token test passed" in run.stdout
