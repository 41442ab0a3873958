"""The console's Security page in headless Chromium (security.mjs): SCRAM users log in with
HTTP basic; a super user manages users and ACLs; a user without ACLs is refused."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import ARTIFACTS, sluice_cli

HERE = Path(__file__).parent


def test_security_page(start_broker):
    if not (HERE / "node_modules" / "playwright-core").exists() or not Path("/usr/bin/chromium").exists():
        pytest.fail("run scripts/console-env first (scripts/test does): it installs Chromium and playwright-core")
    # No admin token: with the authorizer on, the port then asks the browser for a SCRAM
    # user's password (HTTP basic); with a token, the console shows its own token form.
    b = start_broker(extra=["--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS"],
                     name="console-security")
    sluice_cli("user", "create", "admin", "-b", b.bootstrap, stdin="admin-secret\n")
    run = subprocess.run(["node", str(HERE / "security.mjs"), b.admin_url, str(ARTIFACTS / "console-security")],
                         cwd=HERE, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NODE_NO_WARNINGS": "1"})
    assert run.returncode == 0, f"security.mjs failed:\n{run.stdout}\n{run.stderr}"
    assert "security test passed" in run.stdout
