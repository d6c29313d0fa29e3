"""A real headless Chromium, driven over the DevTools protocol, to check pages as a browser sees them.

Why not parse the HTML: "the report renders" means the browser decodes every embedded
PNG (``naturalWidth > 0``) and lays the tables out; only a browser can tell. Chromium
listens on a DevTools port it picks itself (``--remote-debugging-port=0``, announced in
``<user-data-dir>/DevToolsActivePort``), on 127.0.0.1 only; we talk to it with
``websocket-client``.
"""
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import websocket

#: JavaScript that resolves once the page painted twice more: what a scroll or click just changed is on screen
#: (a wait for the page, not for a number of seconds).
PAINTED = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = ("Install it with `sudo apt-get install -y chromium` (Debian/Ubuntu), or point the "
                "CHROMIUM environment variable at a Chrome/Chromium binary.")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         "--window-size=1280,900")


class ChromiumNotFound(RuntimeError):
    pass


def find_chromium() -> str:
    """``$CHROMIUM``, else the first Chromium/Chrome on PATH."""
    configured = os.environ.get("CHROMIUM")
    if configured:
        if shutil.which(configured):
            return shutil.which(configured)
        raise ChromiumNotFound(f"CHROMIUM={configured} is not an executable. {INSTALL_HINT}")
    for name in CANDIDATES:
        if shutil.which(name):
            return shutil.which(name)
    raise ChromiumNotFound(f"No Chromium found (looked for {', '.join(CANDIDATES)} on PATH). {INSTALL_HINT}")


class Page:
    """One browser tab: send DevTools commands, collect the events that arrive meanwhile."""

    def __init__(self, connection: websocket.WebSocket):
        self._connection = connection
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, timeout: float = 60, **params) -> dict[str, Any]:
        message_id = next(self._ids)
        self._connection.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self._connection.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']}")
                return message.get("result", {})
            self.events.append(message)
        raise TimeoutError(f"No answer to {method} within {timeout} s")

    def wait_for(self, event: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = next((e for e in self.events if e.get("method") == event), None)
        while seen is None and time.monotonic() < deadline:
            message = json.loads(self._connection.recv())
            self.events.append(message)
            seen = message if message.get("method") == event else None
        if seen is None:
            raise TimeoutError(f"No {event} within {timeout} s")
        return seen

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate and wait for the load event (all images fetched, not necessarily decoded)."""
        self.send("Page.enable")
        self.send("Network.enable")
        self.events.clear()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise RuntimeError(f"Cannot open {url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired", timeout)

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """Run JavaScript in the page (awaiting a promise) and return its JSON value."""
        result = self.send("Runtime.evaluate", timeout=timeout, expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def poll(self, expression: str, what: str, timeout: float, interval: float = 1.0) -> Any:
        """Evaluate ``expression`` until it is truthy; TimeoutError naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"{what} not within {timeout} s (last: {value!r})")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not just the viewport."""
        import base64

        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def _devtools_port(user_data_dir: Path, process: subprocess.Popen, stderr_log: Path, timeout: float) -> int:
    announced = user_data_dir / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Chromium exited with {process.returncode} before opening DevTools: "
                               f"{stderr_log.read_text()[-2000:]}")
        if announced.exists() and announced.read_text().strip():
            return int(announced.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError(f"Chromium did not open a DevTools port within {timeout} s")


def _page_websocket_url(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
        targets = json.load(answer)
    pages = [t for t in targets if t.get("type") == "page"]
    if pages:
        return pages[0]["webSocketDebuggerUrl"]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["webSocketDebuggerUrl"]


@contextlib.contextmanager
def chromium_page(user_data_dir: Path, binary: str | None = None, timeout: float = 60) -> Iterator[Page]:
    """Start a fresh headless Chromium (own profile dir) and yield a tab; stop it afterwards."""
    user_data_dir.mkdir(parents=True, exist_ok=True)
    command = [binary or find_chromium(), *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"]
    # Its stderr goes to a file, not a pipe: nobody reads a pipe while the page runs, and a
    # browser that fills one (64 KiB) blocks on its next log line.
    stderr_log = user_data_dir / "chromium-stderr.log"
    with open(stderr_log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    connection = None
    try:
        port = _devtools_port(user_data_dir, process, stderr_log, timeout)
        # No Origin header: Chromium refuses DevTools clients from other origins otherwise.
        connection = websocket.create_connection(_page_websocket_url(port), timeout=timeout,
                                                 suppress_origin=True)
        yield Page(connection)
    finally:
        if connection is not None:
            connection.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
