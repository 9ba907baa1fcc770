"""JupyterLab as `make lab` starts it: the server comes up headless on the repository, lists the twelve
notebooks through its REST API, offers the kernel the notebooks name, from this venv, and serves
the widgets extension explore_rounds' round slider renders with.

The server runs on a free port of 127.0.0.1 with a token and its own config and runtime folders
(so a user's Jupyter config cannot change the outcome); every wait is bounded and the server is
shut down through its API (killed if it does not stop), all within a minute.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from graftlib.lab.workbook.runner import notebooks

pytest.importorskip("jupyterlab")
ROOT = Path(__file__).resolve().parents[1]
START_S = 40  # the server's start-up bound; the shutdown gets the rest of the minute


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port: int, token: str, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = r.read()
    return json.loads(body) if body else {}


@pytest.fixture
def lab_server(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    # its own user settings: no autosave (a browser test's edits never reach the repository's notebooks), no news
    settings = tmp_path / "config" / "lab" / "user-settings" / "@jupyterlab"
    for plugin, value in (("docmanager-extension/plugin", {"autosave": False}),
                          ("apputils-extension/notification", {"fetchNews": "false"})):
        (settings / f"{plugin}.jupyterlab-settings").parent.mkdir(parents=True, exist_ok=True)
        (settings / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
    env = dict(os.environ, JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"),  # as `make lab`
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={ROOT}", "--LabApp.expose_app_in_browser=True",  # tests/test_browser.py drives it
           ] + (["--allow-root"] if os.geteuid() == 0 else [])  # CI containers
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, f"JupyterLab exited ({proc.returncode}): {(tmp_path / 'lab.log').read_text()}"
            try:
                api(port, token, "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"JupyterLab did not answer within {START_S} s"
                time.sleep(0.5)
        yield port, token
    finally:
        try:
            api(port, token, "/api/shutdown", method="POST")
            proc.wait(timeout=10)
        except (urllib.error.URLError, ConnectionError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=5)
        log.close()


@pytest.mark.slow
def test_jupyterlab_lists_the_notebooks_and_offers_their_kernel(lab_server):
    port, token = lab_server
    listed = api(port, token, "/api/contents/notebooks")
    names = sorted(item["name"] for item in listed["content"] if item["type"] == "notebook")
    assert names == sorted(b.name for b in notebooks()) and "table1_main_results.ipynb" in names
    wanted = {json.loads(b.read_text())["metadata"]["kernelspec"]["name"] for b in notebooks()}
    assert len(wanted) == 1, f"the notebooks name several kernels: {wanted}"
    specs = api(port, token, "/api/kernelspecs")["kernelspecs"]
    name = wanted.pop()
    assert name in specs, f"kernel {name!r} not offered; JupyterLab has {sorted(specs)}"
    spec = specs[name]["spec"]
    assert spec["language"] == "python"
    # bare "python" is run as the server's own interpreter; a registered kernel names this venv's
    assert spec["argv"][0] == "python" or Path(spec["argv"][0]).resolve() == Path(sys.executable).resolve()


@pytest.mark.slow
def test_jupyterlab_serves_the_widgets_extension_of_the_round_slider(lab_server):
    """explore_rounds' ipywidgets slider needs the widget manager extension in JupyterLab; the kernel side
    redraws on a change of the slider's value (ipywidgets' `interactive`, as the notebook calls it)."""
    import ipywidgets as widgets

    port, token = lab_server
    extensions = api(port, token, "/lab/api/extensions")
    names = {e["name"] for e in (extensions if isinstance(extensions, list) else extensions.get("data", []))}
    assert "jupyter-widgets-jupyterlab-manager" in names, sorted(names)  # @jupyter-widgets/jupyterlab-manager
    drawn = []
    w = widgets.interactive(lambda t: drawn.append(t), t=widgets.IntSlider(min=0, max=5, value=1))
    w.children[0].value = 4
    assert drawn[-1] == 4
