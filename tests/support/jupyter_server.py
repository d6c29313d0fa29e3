"""Real Jupyter servers (JupyterLab, nbclassic) on a free local port, for the browser tests of the notebook.

The notebook is copied into a scratch root first: the front end saves what it runs, and the
committed notebook must stay without outputs. ``expose_app_in_browser`` puts JupyterLab's
application on ``window.jupyterapp``, so the test runs all cells through JupyterLab's own
command (``notebook:run-all-cells``), the one a person triggers from the Run menu; nbclassic's
page has ``Jupyter.actions`` for the same (Cell > Run All). nbclassic is started through
``make notebook-classic`` itself, so the test serves what a user gets from the target.
"""
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple


class Server(NamedTuple):
    url: str      # base URL, e.g. http://127.0.0.1:PORT/
    token: str
    root: Path

    @property
    def log(self) -> Path:
        """The server's (and its kernels') output, for a failure message."""
        return _log_path(self.root)

    def lab_url(self, notebook: str) -> str:
        return f"{self.url}lab/tree/{notebook}?token={self.token}&reset"

    def classic_url(self, notebook: str) -> str:
        # nbclassic serves under /nbclassic/ next to Notebook 7 (which the stack installs).
        return f"{self.url}nbclassic/notebooks/{notebook}?token={self.token}"


def _log_path(root: Path) -> Path:
    return root.parent / f"{root.name}-jupyter.log"


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
def _serve(command: Callable[[int, str], list[str]], notebook: Path, root: Path, env: dict[str, str],
           timeout: float, cwd: Path | None = None) -> Iterator[Server]:
    """Run ``command(port, token)`` (a Jupyter server on a copy of ``notebook`` in ``root``); stop it afterwards.

    Its own process group: a server started through ``make`` stops with the make that started it.
    """
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(notebook, root / notebook.name)
    port, token = free_port(), secrets.token_hex(16)
    log = _log_path(root)
    jupyter_env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root.parent / "jupyter-config"),
                   "JUPYTERLAB_SETTINGS_DIR": str(root.parent / "lab-settings"),
                   "JUPYTERLAB_WORKSPACES_DIR": str(root.parent / "lab-workspaces"),
                   "JUPYTER_RUNTIME_DIR": str(root.parent / "jupyter-runtime"), **env}
    with open(log, "w") as log_file:
        process = subprocess.Popen(command(port, token), stdout=log_file, stderr=subprocess.STDOUT,
                                   env=jupyter_env, cwd=cwd, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}/"
        _wait_until_up(f"{base}api/status?token={token}", process, log, timeout)
        yield Server(base, token, root)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (Jupyter then shuts its kernels down), SIGKILL if it hangs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def _server_options(port: int, token: str) -> list[str]:
    return ["--no-browser", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0", "--ServerApp.allow_root=True"]


@contextlib.contextmanager
def jupyter_lab(notebook: Path, root: Path, env: dict[str, str], timeout: float = 120) -> Iterator[Server]:
    """Start ``jupyter lab`` serving a copy of ``notebook`` in ``root``; stop it afterwards."""
    # No "get notified about Jupyter news?" pop-up over the page (and no request for the news).
    settings = root.parent / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notification = settings / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}')

    def command(port: int, token: str) -> list[str]:
        return [sys.executable, "-m", "jupyter", "lab", *_server_options(port, token), f"--ServerApp.root_dir={root}",
                "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly"]

    with _serve(command, notebook, root, env, timeout) as server:
        yield server


@contextlib.contextmanager
def make_notebook_classic(notebook: Path, root: Path, project: Path, output: Path, env: dict[str, str],
                          timeout: float = 120) -> Iterator[Server]:
    """``make notebook-classic`` itself (nbclassic, TFMA's extension, the classic front-end choice), serving a
    copy of ``notebook`` in ``root`` with this interpreter's virtualenv; stopped afterwards.

    ``-o setup``: the virtualenv is the one running the tests, not re-installed.
    """
    def command(port: int, token: str) -> list[str]:
        options = " ".join(_server_options(port, token))
        return ["make", "--no-print-directory", "-C", str(project), "-o", "setup", "notebook-classic",
                f"VENV={sys.prefix}", f"OUTPUT={output}", f"NOTEBOOKS={root}", f"ARGS={options}"]

    with _serve(command, notebook, root, env, timeout, cwd=project) as server:
        yield server


def run_all_cells(page, server: Server, front_end: str, run_all: str, progress: str, timeout: float,
                  resume: str | None = None, stall_s: float = 60) -> dict:
    """Start the front end's Run All (JavaScript ``run_all``), then poll ``progress`` until every code cell ran.

    ``progress`` returns {total, done, idle, failed, ...}. Polled rather than awaited, so a run that
    stalls fails with where it stood and the server's log, not with a bare evaluate timeout.
    ``resume``: JavaScript that runs the code cells that have not run. It is called ONCE when the
    kernel sits idle for ``stall_s`` with cells left and no error: CI saw nbclassic's Run All stop
    there (8 of 14 cells, kernel idle, no error, nothing in Jupyter's log). The test is about every
    cell running in the page, which the resumed cells still must; the state records the resume.
    """
    page.evaluate(run_all)
    deadline = time.monotonic() + timeout
    state, resumed, last_done, since = None, None, -1, time.monotonic()
    while time.monotonic() < deadline:
        state = page.evaluate(progress)
        if state["done"] == state["total"] and state["idle"]:
            return {**state, "resumed_after": resumed}
        if state["failed"] and state["idle"]:   # Run All stops at a failed cell
            raise AssertionError(f"A notebook cell failed in {front_end}:\n{state['failed'][0][-3000:]}")
        if state["done"] != last_done or not state["idle"]:
            last_done, since = state["done"], time.monotonic()
        elif resume and resumed is None and time.monotonic() - since > stall_s:
            resumed = state["done"]
            page.evaluate(resume)
            since = time.monotonic()
        time.sleep(2)
    # An idle kernel that answered no cell is what ipykernel 7's lost shell wake-up looks like
    # (ipython/ipykernel#1554; setup.py pins ipykernel 6 for it).
    never_started = ("; the idle kernel answered none of them: check that ipykernel is 6.x "
                     "(scripts/kernel_first_cells_check.py)" if state and state["idle"] and not state["done"] else "")
    raise TimeoutError(f"The notebook's cells did not finish in {front_end} within {timeout} s: {state} "
                       f"(resumed after {resumed} cells){never_started}\n"
                       f"Jupyter's log ({server.log}), last lines:\n{server.log.read_text()[-4000:]}")
