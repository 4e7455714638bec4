"""The README's first command works, root included: `make lab` starts a JupyterLab server rooted at
the repository that opens on the start notebook (headless here: no browser, a free port)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

START = "notebooks/00_start_here.ipynb"
TOKEN_WARNING = "ServerApp.token config is deprecated"


def get_when_listening(url: str, timeout: float = 60) -> bytes:
    """GET `url`. With port 0 Jupyter prints its address a moment before it listens on it, so a
    refused connection is retried (waiting for the server, not timing a crash)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                assert r.status == 200
                return r.read()
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def readme_paths() -> list[str]:
    """Every repository path the README names (in backticks, as a link, or heading a line of its
    Layout block) that exists in this checkout: a learner looks for these in the lab's file
    browser."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    path = r"[\w.-]+/[\w./-]*"
    found = set(re.findall(rf"`({path})`", text)) | set(re.findall(rf"\]\(({path})\)", text))
    for block in re.findall(r"```\w*\n(.*?)```", text, re.DOTALL):
        found |= set(re.findall(rf"^ *({path})", block, re.MULTILINE))
    return sorted({p.rstrip("/") for p in found
                   if (ROOT / p).exists() and not p.startswith(".")})


def page_config(html: str) -> dict:
    """The page configuration JupyterLab serves inside its HTML page (what the front end opens)."""
    m = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                  html, re.DOTALL)
    assert m, "no jupyter-config-data in the page"
    return json.loads(m.group(1))


class MakeLab:
    """`make lab` as a learner runs it, in its own session, with its own Jupyter dirs."""

    def __init__(self, tmp_path: Path):
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
               "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
        self.proc = subprocess.Popen(["make", "--no-print-directory", "lab",
                                      "LAB_ARGS=--no-browser --ServerApp.port=0"], cwd=ROOT,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []

    def url(self, timeout: float = 180) -> tuple[str, str, str]:
        """(base, path, token) of the address the server printed for the learner to open."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+)(/[^?\s]*)\?token=(\w+)", line)
            if m:
                return m.groups()
        raise AssertionError("make lab printed no address:\n" + "".join(self.lines[-20:]))

    def stop(self) -> str:
        """Stop the server (SIGTERM to its session) and return everything it logged."""
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            rest, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rest, _ = self.proc.communicate()
        return "".join(self.lines) + (rest or "")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_roots_the_lab_at_the_repository_and_opens_the_start_notebook(tmp_path):
    lab = MakeLab(tmp_path)
    try:
        base, path, token = lab.url()
        # The printed address is the start notebook, not the Launcher (/lab).
        assert path == f"/lab/tree/{START}"
        q = f"?token={token}"
        status = json.loads(get_when_listening(f"{base}/api/status{q}"))
        assert "started" in status
        config = page_config(get_when_listening(f"{base}{path}{q}").decode())
        assert config["treePath"] == START
        # Rooted at the repository: the file browser's top holds the README and the package ...
        top = json.loads(get_when_listening(f"{base}/api/contents{q}"))
        assert {"README.md", "notebooks", "bughunt"} <= {e["name"] for e in top["content"]}
        # ... and every path the README names opens as written.
        paths = readme_paths()
        assert START in paths and "notebooks/glossary.md" in paths and len(paths) >= 5
        for p in paths:
            model = json.loads(get_when_listening(
                f"{base}/api/contents/{urllib.parse.quote(p)}?content=0&token={token}"))
            assert model["path"] == p
            assert (model["type"] == "directory") == (ROOT / p).is_dir(), p
    finally:
        log = lab.stop()
    assert f"Serving notebooks from local directory: {ROOT}" in log
    assert TOKEN_WARNING not in log
    assert "Running as root is not recommended" not in log
