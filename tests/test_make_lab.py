"""The README's first command works, root included: `make lab` starts a JupyterLab server that
answers over HTTP (headless here: no browser, a free port)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT


def get_when_listening(url: str, timeout: float = 60) -> dict:
    """GET `url` as JSON. With port 0 Jupyter prints its address a moment before it listens on
    it, so a refused connection is retried (waiting for the server, not timing a crash)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                assert r.status == 200
                return json.load(r)
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_jupyterlab_over_http_and_stops(tmp_path):
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    proc = subprocess.Popen(["make", "--no-print-directory", "lab",
                             "LAB_ARGS=--no-browser --ServerApp.port=0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+)/lab\?token=(\w+)", line)
            if m:
                url = m.groups()
        assert url, "make lab printed no address:\n" + "".join(lines[-20:])
        base, token = url
        status = get_when_listening(f"{base}/api/status?token={token}")
        assert "started" in status
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=30) as r:
            assert "JupyterLab" in r.read().decode()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not any("Running as root is not recommended" in line for line in lines)
