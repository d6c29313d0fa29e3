"""A real JupyterLab server on a free local port, for the browser tests of the notebook.

The notebook is copied into a scratch root first: JupyterLab saves what it runs, and the
committed notebook must stay without outputs. ``expose_app_in_browser`` puts the
application on ``window.jupyterapp``, so the test runs all cells through JupyterLab's own
command (``notebook:run-all-cells``), the one a person triggers from the Run menu.
"""
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple


class Server(NamedTuple):
    url: str      # base URL, e.g. http://127.0.0.1:PORT/
    token: str
    root: Path

    def lab_url(self, notebook: str) -> str:
        return f"{self.url}lab/tree/{notebook}?token={self.token}&reset"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Jupyter exited with {process.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"Jupyter did not answer on {url} within {timeout} s: {log.read_text()[-3000:]}")


@contextlib.contextmanager
def jupyter_lab(notebook: Path, root: Path, env: dict[str, str], timeout: float = 120) -> Iterator[Server]:
    """Start ``jupyter lab`` serving a copy of ``notebook`` in ``root``; stop it afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(notebook, root / notebook.name)
    port, token = free_port(), secrets.token_hex(16)
    log = root.parent / f"{root.name}-jupyter.log"
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={port}",
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly", "--ServerApp.allow_root=True"]
    jupyter_env = {**os.environ, **env, "JUPYTER_CONFIG_DIR": str(root.parent / "jupyter-config"),
                   "JUPYTERLAB_SETTINGS_DIR": str(root.parent / "lab-settings"),
                   "JUPYTERLAB_WORKSPACES_DIR": str(root.parent / "lab-workspaces"),
                   "JUPYTER_RUNTIME_DIR": str(root.parent / "jupyter-runtime")}
    # No "get notified about Jupyter news?" pop-up over the page (and no request for the news).
    settings = root.parent / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification = settings / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    with open(log, "w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=jupyter_env)
    try:
        base = f"http://127.0.0.1:{port}/"
        _wait_until_up(f"{base}api/status?token={token}", process, log, timeout)
        yield Server(base, token, root)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
