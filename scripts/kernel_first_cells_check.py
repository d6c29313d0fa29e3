"""Does a fresh notebook connection's Run All get every answer? The browser tests' JupyterLab, then
``--runs`` kernels in turn, each sent the metrics notebook's code cells over the kernel websocket the
moment its ``kernel_info_reply`` arrives, as a front end's Run All does; counts the kernels whose
replies never all come (within ``--wait`` s).

Why it exists: ipykernel 7 can lose a shell request that lands while it sends a reply
(ipython/ipykernel#1554), and Jupyter Server's connection nudge makes that likeliest for the first
cells of a fresh connection. CI saw the browser tests' cells stay ``[*]`` with the kernel idle. Run
it beside CPU load (the failure needs a busy machine); docs/development.md, "ipykernel stays at 6".

    .venv/bin/python scripts/kernel_first_cells_check.py --output <a pipeline output dir> --runs 20
    ... --pythonpath <folder with another ipykernel>   # the same check against another version
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from tornado.websocket import websocket_connect

PROJECT = Path(__file__).resolve().parent.parent
NOTEBOOK = PROJECT / "notebooks" / "inspect_metrics.ipynb"
# The server the browser tests start (JupyterLab on a free port, with a token), so the check meets
# the kernels as those tests do.
sys.path.insert(0, str(PROJECT / "tests"))
from support.jupyter_server import jupyter_lab  # noqa: E402


def _message(msg_type: str, content: dict, session: str) -> str:
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session, "username": "",
              "version": "5.3", "date": ""}
    return json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content,
                       "channel": "shell", "buffers": []})


async def _one_kernel(base: str, token: str, cells: list[str], wait: float) -> int:
    """How many of the cells' execute_replies came; the kernel is deleted afterwards."""
    create = urllib.request.Request(f"http://{base}/api/kernels?token={token}", data=b"{}", method="POST")
    kernel = json.load(urllib.request.urlopen(create, timeout=60))["id"]
    session = uuid.uuid4().hex
    socket_ = await websocket_connect(f"ws://{base}/api/kernels/{kernel}/channels?session_id={session}&token={token}")
    try:
        await socket_.write_message(_message("kernel_info_request", {}, session))
        while json.loads(await asyncio.wait_for(socket_.read_message(), wait))["msg_type"] != "kernel_info_reply":
            pass
        pending = set()
        for code in cells:
            request = _message("execute_request", {"code": code, "silent": False, "store_history": True,
                                                   "user_expressions": {}, "allow_stdin": False,
                                                   "stop_on_error": True}, session)
            pending.add(json.loads(request)["header"]["msg_id"])
            await socket_.write_message(request)
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            try:
                reply = json.loads(await asyncio.wait_for(socket_.read_message(), 5))
            except asyncio.TimeoutError:
                continue
            if reply["msg_type"] == "execute_reply":
                pending.discard(reply["parent_header"]["msg_id"])
        return len(cells) - len(pending)
    finally:
        socket_.close()
        urllib.request.urlopen(urllib.request.Request(f"http://{base}/api/kernels/{kernel}?token={token}",
                                                      method="DELETE"), timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="a pipeline output dir the notebook reads")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--wait", type=float, default=180, help="seconds for a kernel's replies")
    parser.add_argument("--pythonpath", default="", help="put first on the kernels' PYTHONPATH")
    args = parser.parse_args()
    if not os.path.isdir(args.output):
        parser.error(f"--output {args.output} is no folder: pass a pipeline run's --output (the notebook reads its "
                     "evaluation), e.g. output/ after `make run`")
    cells = ["".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]
             if cell["cell_type"] == "code"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (args.pythonpath, str(PROJECT)) if p),
           "METRICS_OUTPUT_DIR": os.path.abspath(args.output), "TF_CPP_MIN_LOG_LEVEL": "3"}
    version = subprocess.run([sys.executable, "-c", "import ipykernel; print(ipykernel.__version__)"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch, jupyter_lab(NOTEBOOK, Path(scratch) / "root", env) as server:
        base = server.url.removeprefix("http://").rstrip("/")
        stuck = 0
        for run in range(args.runs):
            answered = asyncio.run(_one_kernel(base, server.token, cells, args.wait))
            stuck += answered < len(cells)
            print(f"kernel {run + 1}/{args.runs}: {answered}/{len(cells)} cells answered", flush=True)
    print(f"ipykernel {version}: {stuck} of {args.runs} kernels left cells unanswered")
    sys.exit(1 if stuck else 0)


if __name__ == "__main__":
    main()
