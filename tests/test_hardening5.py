"""Hardening 5 (issue 56): flags spelled in full, any bytes a file name holds, the project's own files
never overwritten, object-store roots named as the store allows, bounded HTTP, folder flags apart.

Each category has rows run through the real CLI in a subprocess (exit code, no traceback, the
paragraph's key phrase) and unit rows of the one place that fixes it. Complements
``tests/test_hardening4.py``.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, assert_paragraph, run_cli

USER_ERROR = 2



# ---- 1. A flag only as spelled in full ------------------------------------------------------------------

@pytest.mark.parametrize("argv, full", [
    (["run", "--conf", "team.yaml"], "--config"),
    (["prepare", "--conf", "team.yaml"], "--config"),
    (["compile", "--conf", "team.yaml", "--image", "i:1", "--pipeline-root", "gs://bucket/tfx"], "--config"),
    (["run", "--outp", "elsewhere"], "--output"),
    (["models", "--serving", "x"], "--serving-dir"),
    (["report", "--requ"], "--require-latest"),
])
def test_an_abbreviated_flag_is_refused_naming_the_full_one(tmp_path, argv, full):
    (tmp_path / "team.yaml").write_text("epochs: 1\n")
    result = run_cli(*argv, cwd=tmp_path, timeout=120)
    assert_paragraph(result, USER_ERROR, f"{argv[1]} is the start of {full}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.yaml"]  # no ./output, nothing run


def test_every_parser_of_every_command_refuses_abbreviations():
    from pipeline.arguments import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) >= {"run", "prepare", "compile", "deploy", "report", "models", "tensorboard"}
    assert [name for name, sub in commands.items() if sub.allow_abbrev] == []
    assert parser.allow_abbrev is False


def test_every_argument_parser_in_the_code_refuses_abbreviations():
    """The pods' entrypoints (pipeline/kubeflow/) parse flags too: each ``ArgumentParser(...)`` says
    ``allow_abbrev=False`` or is the CLI's ExactParser."""
    loose = []
    for path in Path(PROJECT_ROOT, "pipeline").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "ArgumentParser"
                    and not any(k.arg == "allow_abbrev" for k in node.keywords)):
                loose.append(f"{path}:{node.lineno}")
    assert loose == []


# ---- 4. Any bytes a file name holds, in every message and file --------------------------------------------

FF = os.fsdecode(b"\xff")  # how Python hands on a byte that is not UTF-8 (PEP 383)


@pytest.mark.parametrize("argv, phrase", [
    (lambda t: ["predict", "--model-dir", t / "model", f"bad{FF}name.png"], "bad\\xffname.png does not exist"),
    (lambda t: ["models", "--serving-dir", _made(t / f"srv{FF}")],
     "--serving-dir: {tmp}/srv\\xff holds bytes that are not UTF-8"),
    (lambda t: ["report", "--output", t / f"out{FF}"], "--output: {tmp}/out\\xff holds bytes that are not UTF-8"),
    (lambda t: ["run", "--pipeline-name", f"a{FF}", "--output", t / "out"], "'a\\xff' is not a valid name"),
    (lambda t: ["generate", "--model-dir", t / "model", f"a prompt {FF}"], "does not exist"),
])
def test_a_command_line_byte_that_is_not_utf8_is_shown_never_a_traceback(tmp_path, argv, phrase):
    result = run_cli(*argv(tmp_path), timeout=120)
    assert_paragraph(result, USER_ERROR, phrase.format(tmp=tmp_path))
    assert "UnicodeEncodeError" not in result.stderr and "surrogates" not in result.stderr


def _made(folder: Path) -> Path:
    folder.mkdir()
    return folder


def test_every_writer_named_with_the_handler_writes_a_byte_as_xnn(tmp_path):
    from stackenv import text_out

    assert text_out.printable("caf" + os.fsdecode(b"\xe9") + ".png") == "caf\\xe9.png"
    assert text_out.printable("café \ud800") == "café \\ud800"  # a lone surrogate no file system gave
    path = tmp_path / "log.txt"
    with open(path, "w", encoding="utf-8", errors=text_out.ERRORS) as handle:
        handle.write(f"file {FF}.png\n")
    assert path.read_bytes() == b"file \\xff.png\n"


def test_the_library_log_header_takes_the_command_line_as_it_came(tmp_path, monkeypatch):
    from pipeline import quiet

    monkeypatch.setattr("sys.argv", ["python -m pipeline", "predict", f"bad{FF}.png"])
    with quiet.library_output_to(str(tmp_path / "library.log"), " ".join(["predict", f"bad{FF}.png"])):
        pass
    assert b"predict bad\\xff.png" in (tmp_path / "library.log").read_bytes()


def test_an_encoder_failure_deep_in_a_library_is_a_paragraph_naming_the_name(tmp_path):
    from pipeline.failures import failure_report

    try:
        f"srv{FF}/1".encode()
    except UnicodeEncodeError as error:
        message, code = failure_report(error, str(tmp_path))
    assert code == USER_ERROR
    assert message.startswith("error: A name holds bytes that are not UTF-8 (srv\\xff/1"), message


# ---- 5. A command never writes over what a run keeps -------------------------------------------------------

def _run_output(root: Path) -> Path:
    """A run's output as a run leaves it: a real SQLite store, a pushed version, a pinned schema."""
    import sqlite3

    out = root / "out"
    out.mkdir()
    sqlite3.connect(out / "metadata.sqlite").execute("CREATE TABLE Context (id INTEGER)").connection.commit()
    (out / "serving" / "cnn" / "1").mkdir(parents=True)
    (out / "serving" / "cnn" / "1" / "saved_model.pb").write_bytes(b"pb")
    (out / "schema" / "p").mkdir(parents=True)
    (out / "schema" / "p" / "CURRENT").write_text("schema-1.pbtxt\n")
    return out


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("command, target, phrase", [
    ("report", lambda o: o / "metadata.sqlite", "is the ML Metadata store of the run in {out}"),
    ("report", lambda o: _link(o.parent / "page.html", o / "metadata.sqlite"), "which leads to {out}/metadata.sqlite"),
    ("report", lambda o: o / "serving" / "cnn" / "1" / "r.html", "inside {out}/serving, which the run in {out} keeps"),
    ("report", lambda o: o / "schema" / "p" / "CURRENT", "inside {out}/schema"),
    ("report", lambda o: o / "serving", "inside {out}/serving"),
    ("report", lambda o: o.parent, "is a folder"),
    ("compile", lambda o: o / "metadata.sqlite", "is the ML Metadata store"),
    ("compile", lambda o: o / "tfx" / "p.yaml", "inside {out}/tfx"),
])
def test_a_to_flag_never_writes_over_what_a_run_keeps(tmp_path, command, target, phrase):
    out = _run_output(tmp_path)
    path = target(out)
    before = _kept(out)
    argv = (["report", "--output", out, "--to", path] if command == "report" else
            ["compile", "--image", "i:1", "--pipeline-root", "gs://bucket/tfx", "--output", path])
    result = run_cli(*argv, timeout=120)
    flag = "--to" if command == "report" else "--output"
    assert_paragraph(result, USER_ERROR, f"error: {flag}: ", phrase.format(out=out), "Nothing was written")
    assert _kept(out) == before


def _kept(out: Path) -> dict[Path, bytes]:
    """What the run keeps (its library log, which the command appends to, aside)."""
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "logs" not in p.relative_to(out).parts}


def test_an_sqlite_file_outside_a_run_is_refused_and_the_report_beside_a_run_is_not(tmp_path):
    import sqlite3

    from stackenv.errors import ConfigError

    from artifacts.write_targets import check_write_target

    out = _run_output(tmp_path)
    check_write_target(str(out / "report.html"), "--to")  # the default: beside the store, the run's own page
    check_write_target(str(out / "reports" / "week1.html"), "--to")
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ConfigError, match="is an SQLite database"):
        check_write_target(str(tmp_path / "other.db"), "--to")


# ---- 6. Object-store roots named as the store allows ---------------------------------------------------------

@pytest.mark.parametrize("root, phrase", [
    ("minio:///tfx", "minio:///tfx names no bucket"),
    ("s3:///tfx", "s3:///tfx names no bucket"),
    ("gs://My_Bucket/tfx", "the bucket 'My_Bucket' is not a valid Cloud Storage bucket name"),
    ("s3://ab/tfx", "the bucket 'ab' has 2 characters"),
    ("minio://team..data/tfx", "no '..'"),
    ("gs://google-models/tfx", "is not allowed by Cloud Storage"),
])
def test_compile_refuses_a_root_whose_bucket_the_store_would_refuse(tmp_path, root, phrase):
    result = run_cli("compile", "--image", "i:1", "--pipeline-root", root, "--s3-endpoint", "http://minio:9000",
                     "--output", tmp_path / "p.yaml", timeout=120)
    assert_paragraph(result, USER_ERROR, "compile --pipeline-root: ", phrase)
    assert not (tmp_path / "p.yaml").exists()


def test_compile_refuses_a_data_uri_without_a_bucket(tmp_path):
    result = run_cli("compile", "--image", "i:1", "--pipeline-root", "gs://team-bucket/tfx", "--data", "gs:///images",
                     "--output", tmp_path / "p.yaml", timeout=120)
    assert_paragraph(result, USER_ERROR, "--data gs:///images names no bucket")


def test_deploy_refuses_a_root_without_a_bucket_before_connecting(tmp_path):
    package = tmp_path / "p.yaml"
    package.write_text("pipelineInfo: {name: p}\nroot: {}\ndeploymentSpec: {}\ncomponents: {}\n"
                       "schemaVersion: 2.1.0\ndefaultPipelineRoot: minio://mlpipeline/tfx\n")
    result = run_cli("deploy", "--host", "http://127.0.0.1:9", "--package", package, "--pipeline-root",
                     "minio:///tfx", "--run", timeout=120)
    assert_paragraph(result, USER_ERROR, "deploy --pipeline-root", "minio:///tfx names no bucket")


@pytest.mark.parametrize("uri, ok", [
    ("gs://my-bucket/x", True), ("gs://my_bucket.example.com/x", True), ("s3://my.bucket-1/x", True),
    ("minio://mlpipeline/v2", True), ("s3://My-Bucket/x", False), ("s3://192.168.1.1/x", False),
    ("s3://xn--bucket/x", False), ("s3://bucket-s3alias/x", False), ("s3://-bucket/x", False),
    ("gs://goog-x/y", False), ("gs://" + "a" * 64 + "/x", False), ("s3://my_bucket/x", False),
])
def test_bucket_names_follow_the_stores_published_rules(uri, ok):
    from pipeline.kubeflow.bucket_names import bucket_problem

    assert (bucket_problem(uri) == "") is ok, bucket_problem(uri)


# ---- 3. Every HTTP call of deploy ends, whatever the server does ----------------------------------------------

HEALTH = b'{"commit_sha": "x", "tag_name": "2.3.0", "multi_user": false}'
PACKAGE = ("pipelineInfo: {name: slow-test}\nroot: {dag: {tasks: {}}}\ndeploymentSpec: {executors: {}}\n"
           "components: {}\nschemaVersion: 2.1.0\nsdkVersion: kfp-2.5.0\ndefaultPipelineRoot: gs://team-bucket/tfx\n")


@contextlib.contextmanager
def _slow_server(slow_health: bool, endless: bool = False):
    """A server that sends its headers, then one byte every 0.2 s (or, ``endless``, a fast body without end); the
    health endpoint answers at once unless ``slow_health``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            quick = self.path.startswith("/apis/v2beta1/healthz") and not slow_health
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(HEALTH) if quick else 10**9))
            self.end_headers()
            try:
                if quick:
                    self.wfile.write(HEALTH)
                    return
                while not stop.is_set():
                    self.wfile.write(b" " * (65536 if endless else 1))
                    self.wfile.flush()
                    stop.wait(0.001 if endless else 0.2)
            except OSError:
                pass

        do_POST = do_GET

    stop = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def package(tmp_path, monkeypatch) -> Path:
    """A minimal compiled package to deploy in process, with kfp's context file kept in ``tmp_path``."""
    import kfp

    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    path = tmp_path / "p.yaml"
    path.write_text(PACKAGE)
    return path


@pytest.mark.parametrize("endless", [False, True])
def test_a_health_check_that_never_ends_is_cut_off_within_its_timeout(package, endless):
    with _slow_server(slow_health=True, endless=endless) as url:
        started = time.monotonic()
        result = run_cli("deploy", "--host", url, "--package", package, timeout=120)
        took = time.monotonic() - started
    phrase = "answered with more than 1024 KiB" if endless else "the whole answer did not arrive within 10 s"
    assert_paragraph(result, USER_ERROR, "checking the API health", phrase)
    assert took < 60, took  # the timeout (10 s) and the interpreter's start, not the server's pace


def test_an_api_call_that_never_ends_is_cut_off_naming_api_timeout(package):
    from pipeline.kubeflow.connection import DeployError
    from pipeline.kubeflow.deploy import deploy

    with _slow_server(slow_health=False) as url:
        started = time.monotonic()
        with pytest.raises(DeployError) as raised:
            deploy(url, str(package), api_timeout=2, cluster_checks=False)
        took = time.monotonic() - started
    assert "its whole answer did not arrive within 2 s" in str(raised.value), raised.value
    assert "--api-timeout SECONDS (now 2)" in str(raised.value)
    assert took < 30, took


def test_api_timeout_is_a_deploy_flag():
    from pipeline.arguments import build_parser

    deploy_parser = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "deploy"]
    assert "--api-timeout" in {o for a in deploy_parser._actions for o in a.option_strings}


def test_an_api_answer_without_end_is_cut_at_its_cap(package, monkeypatch):
    from pipeline.kubeflow import connection
    from pipeline.kubeflow.connection import DeployError
    from pipeline.kubeflow.deploy import deploy

    monkeypatch.setattr(connection, "API_BODY_BYTES", 1 << 20)  # the real cap, 64 MiB, would only take longer
    with _slow_server(slow_health=False, endless=True) as url:
        with pytest.raises(DeployError) as raised:
            deploy(url, str(package), api_timeout=20, cluster_checks=False)
    assert "answered a Kubeflow Pipelines API call with more than 1 MiB" in str(raised.value), raised.value


def _in_a_thread(call, join_s: float = 60):
    """``call()`` in a thread other than the main one: what it returned or raised, and its seconds."""
    outcome = {}

    def target():
        started = time.monotonic()
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test as it came
            outcome["value"] = error
        outcome["took"] = time.monotonic() - started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(join_s)
    assert not thread.is_alive(), f"still running after {join_s} s"
    return outcome["value"], outcome["took"]


def test_an_api_call_that_never_ends_is_cut_off_in_a_thread_other_than_the_main_one(package):
    from pipeline.kubeflow.connection import DeployError
    from pipeline.kubeflow.deploy import deploy

    with _slow_server(slow_health=False) as url:
        raised, took = _in_a_thread(lambda: deploy(url, str(package), api_timeout=2, cluster_checks=False))
    assert isinstance(raised, DeployError), raised
    assert "its whole answer did not arrive within 2 s" in str(raised), raised
    assert took < 30, took


def test_a_deadline_in_another_thread_cuts_a_read_that_keeps_receiving_and_never_fires_late():
    import socket

    from pipeline.kubeflow.http_limits import deadline

    class Late(Exception):
        pass

    left, right = socket.socketpair()
    dripping = threading.Event()

    def drip():  # a server that sends one byte every 0.05 s, for ever
        while not dripping.wait(0.05):
            right.send(b"x")

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()

    def read_for_ever(seconds, outer=None):
        with contextlib.ExitStack() as stack:
            if outer is not None:
                stack.enter_context(deadline(outer, lambda: Late("outer")))
            with deadline(seconds, lambda: Late("inner")):
                while True:
                    left.recv(1)

    def ends_in_time():
        with deadline(0.2, lambda: Late("fired after its block ended")):
            left.recv(1)
        time.sleep(0.6)  # past the deadline: nothing may arrive now
        return "done"

    try:
        raised, took = _in_a_thread(lambda: read_for_ever(0.3))
        assert isinstance(raised, Late) and str(raised) == "inner" and took < 5, (raised, took)
        raised, took = _in_a_thread(lambda: read_for_ever(30, outer=0.3))  # the sooner, outer one stays in force
        assert isinstance(raised, Late) and str(raised) == "outer" and took < 5, (raised, took)
        assert _in_a_thread(ends_in_time)[0] == "done"
    finally:
        dripping.set()
        dripper.join(5)
        left.close()
        right.close()


# ---- 7. Folder flags for different purposes never hold one another ----------------------------------------------

def _images(root: Path) -> Path:
    import numpy as np
    from PIL import Image

    for label, base in (("dark", 30), ("light", 220)):
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8, 3), base + i, np.uint8)).save(root / label / f"{i}.png")
    return root


@pytest.mark.parametrize("row, argv, phrase", [
    ("score-inside-data", lambda t: ["--data", _images(t / "img"), "--score", _images(t / "img" / "dark" / "new")],
     "--score: {tmp}/img/dark/new is inside the --data folder {tmp}/img"),
    ("score-is-data", lambda t: ["--data", _images(t / "img"), "--score", t / "img"],
     "--score: {tmp}/img is the --data folder {tmp}/img"),
    ("data-inside-score", lambda t: ["--data", _images(t / "new" / "img"), "--score", t / "new"],
     "--data: {tmp}/new/img is inside the --score folder {tmp}/new"),
    ("score-linked-to-data", lambda t: ["--data", _images(t / "img"), "--score",
                                        _link(t / "link", t / "img" / "light")],
     "--score: {tmp}/link is inside the --data folder {tmp}/img"),
])
def test_the_data_and_the_folder_to_score_are_kept_apart(tmp_path, row, argv, phrase):
    args = argv(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    result = run_cli("run", "--train-steps", "2", "--output", tmp_path / "out", *args, timeout=300)
    assert_paragraph(result, USER_ERROR, phrase.format(tmp=tmp_path), "Nothing was written")
    assert sorted(tmp_path.rglob("*")) == before


def test_a_manifest_is_never_written_into_the_data_it_reads(tmp_path):
    data = _images(tmp_path / "img")
    result = run_cli("tfjob", "--image", "i:1", "--examples", "gs://b-1/t", "--transform-graph",
                     "gs://b-1/g", "--model-dir", "gs://b-1/m", "--data", data, "--output", tmp_path / "out",
                     "--to", data / "job.yaml", timeout=120)
    assert_paragraph(result, USER_ERROR, f"--to: {data}/job.yaml is inside the --data folder {data}")
    assert not (data / "job.yaml").exists()


# ---- Weak: config files ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, phrase", [
    ("epochs: 2\nbatch-size: 8\nepochs: 3\n", "sets `epochs` twice (lines 1 and 3)"),
    ("batch_size: 8\nbatch-size: 16\n", "sets --batch-size twice (as `batch_size` and `batch-size`)"),
    ("epochs: 2\ntrain-steps: 8\n", "sets both `epochs` and `train-steps`"),
    ("output: ~nosuchuser-h5/x\n", "names no home folder"),
])
def test_a_config_file_mistake_names_the_file(tmp_path, text, phrase):
    path = tmp_path / "team.yaml"
    path.write_text(text)
    result = run_cli("run", "--config", path, cwd=tmp_path, timeout=120)
    assert_paragraph(result, USER_ERROR, f"--config: {path}", phrase)
    assert "usage:" not in result.stderr


def test_a_config_file_output_under_home_is_expanded_as_a_shell_would(tmp_path, monkeypatch):
    from pipeline import config_file
    from pipeline.arguments import build_parser

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "team.yaml"
    path.write_text("output: ~/runs\n")
    argv = config_file.expand(["run", "--config", str(path)], build_parser())
    assert f"--output={tmp_path}/home/runs" in argv, argv


def test_deploy_takes_its_settings_from_a_config_file(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text(f"host: http://127.0.0.1:9\npackage: {tmp_path / 'missing.yaml'}\n")
    result = run_cli("deploy", "--config", path, timeout=120)
    assert_paragraph(result, USER_ERROR, f"Pipeline package {tmp_path / 'missing.yaml'} does not exist")


# ---- Weak: serving and tools -------------------------------------------------------------------------------------

def _saved_model(version_dir: Path) -> Path:
    import tensorflow as tf

    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(version_dir))
    return version_dir


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_models_removes_the_copy_a_killed_push_left_and_says_so(tmp_path):
    base = tmp_path / "serving" / "cnn"
    _saved_model(base / "1")
    dead = base / f".incomplete-2-{_dead_pid()}-0123abcd"
    live = base / f".incomplete-3-{os.getpid()}-4567abcd"  # a push still running: left alone
    for copy in (dead, live):
        copy.mkdir()
        (copy / "saved_model.pb").write_bytes(b"half")
    result = run_cli("models", "--serving-dir", base, timeout=300)
    assert_paragraph(result, 0, f"Removed 1 leftover staging copy of an interrupted push from {base} ({dead.name})")
    assert not dead.exists() and live.exists()


def test_the_next_push_removes_a_killed_pushs_copy(tmp_path):
    import shutil

    from artifacts import serving_dir

    base = tmp_path / "serving"
    model = _saved_model(tmp_path / "model")
    dead = base / f".incomplete-7-{_dead_pid()}-89abcdef"
    dead.mkdir(parents=True)
    final = serving_dir.publish_version(str(model), str(base), {}, lambda a, b: shutil.copytree(a, b))
    assert not dead.exists() and os.path.isfile(os.path.join(final, "saved_model.pb"))
    assert [p.name for p in base.iterdir() if p.name.startswith(".")] == []


def test_models_names_a_version_whose_variables_are_missing(tmp_path):
    import shutil

    base = tmp_path / "serving" / "cnn"
    _saved_model(base / "1")
    shutil.rmtree(_saved_model(base / "2") / "variables")
    result = run_cli("models", "--serving-dir", base, timeout=300)
    assert_paragraph(result, 0, "TF Serving cannot load this version: its variables/ folder",
                      "warning: the served version 2 is damaged")
    assert result.stdout.count("TF Serving cannot load this version") == 1


def test_a_listing_whose_reader_leaves_ends_normally(tmp_path):
    import subprocess
    import sys

    base = tmp_path / "serving"
    for version in range(1, 500):
        (base / str(version)).mkdir(parents=True)
        (base / str(version) / "saved_model.pb").write_bytes(b"x")
    child = subprocess.Popen([sys.executable, "-m", "pipeline", "models", "--serving-dir", str(base)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=PROJECT_ROOT)
    first = child.stdout.readline()  # `| head -1`
    child.stdout.close()
    _, stderr = child.communicate(timeout=300)
    assert b"version" in first
    assert child.returncode == 0, stderr[-2000:]
    assert b"BrokenPipe" not in stderr and b"failed" not in stderr, stderr[-2000:]


@pytest.mark.parametrize("damage, reason", [("garbage", "file is not a database"),
                                            ("foreign", "no such column")])
@pytest.mark.parametrize("command", ["report", "run"])
def test_a_damaged_metadata_store_is_one_paragraph(tmp_path, damage, reason, command):
    import sqlite3

    out = tmp_path / "out"
    out.mkdir()
    store = out / "metadata.sqlite"
    if damage == "garbage":
        store.write_bytes(os.urandom(4096))
    else:
        sqlite3.connect(store).execute("CREATE TABLE Context (id INTEGER)").connection.commit()
    extra = ["--train-steps", "1", "--data", _images(tmp_path / "img")] if command == "run" else []
    result = run_cli(command, "--output", out, *extra, timeout=300)
    assert_paragraph(result, USER_ERROR, f"The ML Metadata store {out}/metadata.sqlite cannot be read ({reason}",
                      "Restore metadata.sqlite from a backup")
    assert "query:" not in result.stderr and not (out / "serving").exists()


def test_the_next_run_names_the_failed_component_not_a_class_path():
    from pipeline.local.run_lock import failure_line
    from pipeline.local.runner import ComponentFailed

    try:
        try:
            raise ComponentFailed("Trainer", ValueError("the loss became nan"))
        except ComponentFailed as error:  # Beam re-raises it with its class path in the text
            raise RuntimeError("pipeline.local.runner.ComponentFailed: Trainer failed: ValueError: the loss "
                               "became nan [while running 'Run[Trainer]']") from error
    except RuntimeError as error:
        line = failure_line(error)
    assert line == "Trainer failed: ValueError: the loss became nan"
    assert failure_line(RuntimeError("pipeline.local.runner.ComponentFailed: Pusher failed: "
                                     "tensorflow.python.framework.errors_impl.ResourceExhaustedError: full")) == \
        "Pusher failed: ResourceExhaustedError: full"


@pytest.mark.parametrize("host, phrase", [("10.255.255.1", "is not an address of this machine"),
                                          ("no-such-host.invalid", "is not an address or a host name")])
def test_tensorboard_names_a_host_it_cannot_listen_on(tmp_path, host, phrase):
    result = run_cli("tensorboard", "--output", tmp_path, "--host", host, "--port", "0", timeout=120)
    assert_paragraph(result, USER_ERROR, "error: --host: ", phrase)


def test_tensorboard_points_at_the_logs_of_its_own_output(tmp_path):
    from stackenv.errors import MissingInput

    from ml_metadata.proto import metadata_store_pb2

    from pipeline.results import mlmd
    from pipeline.tensorboard import latest_trainer_logs

    out = tmp_path / "elsewhere"
    out.mkdir()
    store = mlmd.open_store(mlmd.sqlite_config(str(out / "metadata.sqlite")))
    context_type = store.put_context_type(metadata_store_pb2.ContextType(name="pipeline"))
    [context] = store.put_contexts([metadata_store_pb2.Context(type_id=context_type, name="p")])
    execution_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name="x"))
    [execution] = store.put_executions([metadata_store_pb2.Execution(type_id=execution_type)])
    store.put_attributions_and_associations([], [metadata_store_pb2.Association(context_id=context,
                                                                                execution_id=execution)])
    with pytest.raises(MissingInput) as raised:
        latest_trainer_logs(str(out))
    assert f"{out}/logs/" in str(raised.value) and "output/logs" not in str(raised.value)


# ---- Weak: Kubeflow ----------------------------------------------------------------------------------------------

def test_compile_warns_for_a_backend_between_the_tested_ones_and_says_it_replaced_a_package(tmp_path):
    package = tmp_path / "p.yaml"
    argv = ["compile", "--image", "i:1", "--pipeline-root", "gs://team-bucket/tfx", "--kfp-version", "2.4.0",
            "--output", package]
    first = run_cli(*argv, timeout=300)
    assert_paragraph(first, 0, "--kfp-version is KFP backend 2.4.0, not one of the versions this project is "
                                "tested against (2.3.0, 2.5.0")
    assert "Replaced" not in first.stderr
    again = run_cli(*argv, timeout=300)
    assert_paragraph(again, 0, f"Replaced the existing {package} with this compilation")


# ---- Weak: data --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spans, phrase", [("1-2", "1-2 names 2 spans, and TFX's ExampleGen reads one span per run"),
                                           ("x", "'x' is not a span")])
def test_a_range_of_spans_is_refused_before_anything_runs(tmp_path, spans, phrase):
    data = tmp_path / "spans"
    for span in (1, 2):
        _images(data / f"span-{span}")
    result = run_cli("run", "--data", data, "--span-pattern", "span-{SPAN}", "--spans", spans, "--output",
                     tmp_path / "out", timeout=120)
    assert_paragraph(result, USER_ERROR, phrase)
    assert not (tmp_path / "out").exists()


def test_a_long_message_keeps_its_fix_sentence_when_cut(tmp_path):
    from components.split_check import SplitError
    from pipeline.failures import MAX_MESSAGE_CHARS, failure_report

    classes = {f"class-{i:03d}": 1 for i in range(200)}
    error = SplitError(f"Class(es) {sorted(classes)} have no example in the train split (examples per split: "
                       f"eval 200, train 0; train classes: {classes}), so the model could never predict them. Add "
                       "more examples of those classes (the split is a hash of each example's id), then run again.")
    message, code = failure_report(error, str(tmp_path))
    assert message.startswith("error: Class(es) ['class-000'")
    assert message.endswith("Add more examples of those classes (the split is a hash of each example's id), "
                            "then run again."), message[-300:]
    assert "characters left out; the whole message: " in message and len(message) < MAX_MESSAGE_CHARS + 200


# ---- 2. A full disk, at any step, is one paragraph -------------------------------------------------------------

def _component_failed(node: str, cause: BaseException) -> BaseException:
    from pipeline.local.runner import ComponentFailed

    try:
        try:
            raise cause
        except BaseException as error:
            raise ComponentFailed(node, error) from error
    except ComponentFailed as failed:
        return failed


def _served_output(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "serving" / "cnn" / "3").mkdir(parents=True)
    (out / "serving" / "cnn" / "3" / "saved_model.pb").write_bytes(b"pb")
    os.utime(out / "serving" / "cnn" / "3", (1, 1))  # pushed before this command began
    (out / "tfx").mkdir()
    (out / "tfx" / "blob").write_bytes(b"x" * 3 * 2**20)
    return out


def _errors_of_a_full_disk(out: Path):
    import tensorflow as tf

    transform = out / "tfx" / "Transform" / "transform_graph" / "7" / "variables.data"
    return {
        "Transform (OSError)": ("Transform", OSError(28, "No space left on device", str(transform)), str(transform)),
        "Trainer export (TF)": ("Trainer", tf.errors.ResourceExhaustedError(
            None, None, f"{out}/tfx/Trainer/model/9/Format-Serving/variables/variables.data-00000-of-00001.tempstate1;"
            " No space left on device"),
            f"{out}/tfx/Trainer/model/9/Format-Serving/variables/variables.data-00000-of-00001.tempstate1"),
        "Pusher (OSError)": ("Pusher", OSError(28, "No space left on device", f"{out}/serving/cnn/.incomplete-4-1-ab"),
                             f"{out}/serving/cnn/.incomplete-4-1-ab"),
        "MLMD update (SQL)": ("Evaluator", RuntimeError("Cannot create node for type_id: 11 Error when executing "
                                                       "query: database or disk is full query: INSERT INTO Context"),
                              f"{out}/metadata.sqlite"),
    }


@pytest.mark.parametrize("case", ["Transform (OSError)", "Trainer export (TF)", "Pusher (OSError)",
                                  "MLMD update (SQL)"])
def test_a_full_disk_at_any_step_is_one_paragraph_naming_step_path_room_and_the_served_model(tmp_path, case):
    from pipeline.failures import failure_report

    out = _served_output(tmp_path)
    node, cause, path = _errors_of_a_full_disk(out)[case]
    message, code = failure_report(_component_failed(node, cause), str(out / "logs"))
    assert message.startswith(f"error: The disk is full: no space was left while {node} ran, writing {path} ("), message
    assert "MB free there now" in message and "free at least 3 MB there" in message, message
    assert "The served model is unchanged (cnn version 3 in" in message, message
    assert "Traceback" not in message and "query:" not in message and "Full traceback" not in message
    assert "\n" not in message and code != 0
    assert not (out / "logs").exists()  # no traceback file: no room for one, and none is written elsewhere


def test_a_full_disk_before_any_push_says_nothing_was_pushed(tmp_path):
    from pipeline.failures import failure_report

    message, _ = failure_report(OSError(28, "No space left on device", str(tmp_path / "out" / "data" / "x")),
                                str(tmp_path / "out" / "logs"))
    assert "while the command wrote its files" in message and "Nothing was pushed" in message, message


def _mount_tmpfs(folder: Path, size: str) -> None:
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")


def _unmount(folder: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(disk: Path, leave_kib: int) -> Path:
    """A file that takes the disk's space but ``leave_kib``."""
    import shutil

    filler = disk / "filler"
    free = shutil.disk_usage(disk).free - leave_kib * 1024
    with open(filler, "wb") as handle:
        handle.truncate(0)
        chunk = b"\0" * 2**20
        while free > 0:
            handle.write(chunk[:min(len(chunk), free)])
            free -= len(chunk)
    return filler


def _temp_logs() -> set[str]:
    import tempfile

    folder = Path(tempfile.gettempdir()) / "tfx-project-logs"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


@pytest.mark.slow
@pytest.mark.parametrize("leave_kib", [64, 2048])
def test_a_run_on_a_full_tmpfs_after_a_good_push_is_one_paragraph_and_resumes(tmp_path, leave_kib):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "400m")
    try:
        out = disk / "out"
        env = {**os.environ, "TFX_PROJECT_MIN_FREE_MB": "0"}
        # The subject is the full disk, not the gate: the first run must push (the served version the second
        # run's paragraph names), and whether a 4-step model beats the logistic-regression reference by the
        # default margin is the machine's call. --min-accuracy 0 and --gate-margin -1 leave no bar.
        no_bar = ("--min-accuracy", "0", "--gate-margin", "-1")
        first = run_cli("run", "--train-steps", "4", *no_bar, "--output", out, env=env, timeout=1500)
        assert first.returncode == 0, first.stderr[-3000:]
        versions = sorted(p.name for p in (out / "serving" / "cnn").iterdir())
        filler = _fill(disk, leave_kib)
        logs_before = _temp_logs()
        full = run_cli("run", "--train-steps", "6", *no_bar, "--output", out, env=env, timeout=1500)
        assert_paragraph(full, full.returncode, "error: The disk is full: no space was left while",
                          f"The served model is unchanged (cnn version {versions[-1]} in {out}/serving")
        assert full.returncode != 0 and "query:" not in full.stderr and "ResourceExhaustedError" not in full.stderr
        assert _temp_logs() == logs_before  # nothing written outside --output
        assert sorted(p.name for p in (out / "serving" / "cnn").iterdir()) == versions  # no half version
        filler.unlink()
        again = run_cli("run", "--train-steps", "6", *no_bar, "--output", out, env=env, timeout=1500)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "cached" in again.stderr + again.stdout
    finally:
        _unmount(disk)


@pytest.mark.slow
def test_an_error_on_a_disk_with_no_room_left_is_read_as_the_full_disk(tmp_path):
    """SQLite, after its full write was rolled back, says only "cannot commit - no transaction is active"."""
    from pipeline.failures import failure_report

    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "2m")
    try:
        (disk / "out").mkdir()
        _fill(disk, 16)
        error = RuntimeError("Error when executing query: cannot commit - no transaction is active query: COMMIT;")
        message, _ = failure_report(_component_failed("ImportExampleGen", error), str(disk / "out" / "logs"))
        assert message.startswith("error: The disk is full: no space was left while ImportExampleGen ran"), message
        assert "(the step's own error: cannot commit - no transaction is active)" in message
        assert "query:" not in message
    finally:
        _unmount(disk)


@pytest.mark.slow
@pytest.mark.parametrize("leave_kib", [64, 0])
def test_prepare_on_a_full_tmpfs_is_one_paragraph_and_writes_nothing_elsewhere(tmp_path, leave_kib):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "4m")
    try:
        (disk / "out" / "logs").mkdir(parents=True)
        (disk / "out" / "logs" / "library-output.log").write_bytes(b"x" * 4096)  # a full page: an append needs room
        _fill(disk, leave_kib)
        logs_before = _temp_logs()
        result = run_cli("prepare", "--output", disk / "out", timeout=600)
        assert_paragraph(result, result.returncode, "error: The disk is full: no space was left while the command "
                          f"wrote its files, writing {disk}/out", "Nothing was pushed")
        assert result.returncode != 0
        assert _temp_logs() == logs_before
    finally:
        _unmount(disk)


def test_a_deadline_cuts_a_blocking_read_and_never_extends_an_outer_one():
    import socket

    from pipeline.kubeflow.http_limits import deadline

    class Late(Exception):
        pass

    import signal

    outer_before, _ = signal.getitimer(signal.ITIMER_REAL)  # e.g. a test runner's own timeout
    began = time.monotonic()
    left, right = socket.socketpair()
    try:
        started = time.monotonic()
        with pytest.raises(Late):
            with deadline(0.3, Late):
                left.recv(1)  # a server that never answers
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(Late, match="outer"):
            with deadline(0.3, lambda: Late("outer")):
                with deadline(30, lambda: Late("inner")):  # the outer, sooner deadline stays in force
                    left.recv(1)
        assert time.monotonic() - started < 5
    finally:
        left.close()
        right.close()
    outer_after, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_before:  # a timer armed before is restored, less the time spent
        assert abs(outer_after - (outer_before - (time.monotonic() - began))) < 1, (outer_before, outer_after)
    else:
        assert outer_after == 0.0  # nothing left armed
