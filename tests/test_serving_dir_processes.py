"""The serving directory under real processes (issue 36): two publishers at once, and a publisher
killed (SIGKILL) halfway through its copy. A reader, TF Serving's rule (numeric folders holding
saved_model.pb) as ``artifacts/serving_dir.list_versions`` applies it, never sees half a version.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from conftest import PROJECT_ROOT, run_cli
from support.tiny_saved_model import save_tiny_saved_model

from artifacts import serving_dir

# A child process that publishes a SavedModel ``count`` times once ``go`` exists (``go.<name>.ready``
# says it is waiting for it). ``pause`` seconds between copied files (and a ``copying`` marker after the
# first) give the parent a moment to kill it mid-copy; the copy itself is plain file copying, as TFX's
# io_utils.copy_dir does locally.
_PUBLISHER = """
import os, shutil, sys, time
from artifacts.serving_dir import publish_version

model, base, name, count, go, pause = sys.argv[1:7]
count, pause = int(count), float(pause)

def copy_dir(source, destination):
    for root, _, files in os.walk(source):
        target = os.path.join(destination, os.path.relpath(root, source))
        os.makedirs(target, exist_ok=True)
        for index, file in enumerate(sorted(files)):
            shutil.copyfile(os.path.join(root, file), os.path.join(target, file))
            if pause:
                open(go + ".copying", "w").close()
                time.sleep(pause)

open(go + "." + name + ".ready", "w").close()  # imported and waiting for the go
while not os.path.exists(go):
    time.sleep(0.01)
for i in range(count):
    print(publish_version(model, base, {"publisher": name, "push": i}, copy_dir=copy_dir), flush=True)
"""


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    return save_tiny_saved_model(str(tmp_path_factory.mktemp("model") / "saved"))


def _publisher(model, base, name, count, go, pause=0.0):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen([sys.executable, "-c", _PUBLISHER, model, str(base), name, str(count), str(go),
                             str(pause)], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _complete(version_dir):
    loaded = tf.saved_model.load(version_dir)  # held: its variables must outlive the call
    return loaded.apply(tf.constant([2.0])).numpy().tolist() == [6.0]


def test_two_publishers_at_once_each_get_their_own_complete_version(saved_model, tmp_path):
    """Both start in the same second, so both reach for the same timestamp version: neither fails,
    neither overwrites the other, and every version holds the whole model and its own push_info."""
    base, go = tmp_path / "serving", tmp_path / "go"
    # 0.5 s per copied file: each copy takes longer than the gap between the two starts, so both
    # publishers pick the same version number before either has renamed its copy into place.
    publishers = [_publisher(saved_model, base, name, 3, go, pause=0.5) for name in ("a", "b")]
    deadline = time.monotonic() + 300  # a bound against a hang, not a speed assertion
    while not all(os.path.exists(f"{go}.{name}.ready") for name in ("a", "b")):  # both imported, both waiting
        assert all(p.poll() is None for p in publishers) and time.monotonic() < deadline, \
            [p.communicate()[1][-3000:] for p in publishers if p.poll() is not None]
        time.sleep(0.05)
    go.touch()
    outputs = [p.communicate(timeout=300) for p in publishers]
    for process, (_, err) in zip(publishers, outputs):
        assert process.returncode == 0, err[-3000:]
    published = [line for out, _ in outputs for line in out.split()]
    versions = serving_dir.list_versions(str(base))
    assert len(versions) == 6 and sorted(published) == sorted(str(base / str(v)) for v in versions)
    assert sorted(os.listdir(base)) == sorted(str(v) for v in versions)  # no staging left behind
    by_publisher = {}
    for version in versions:
        info = serving_dir.read_push_info(str(base / str(version)))
        assert info["version"] == version
        by_publisher.setdefault(info["publisher"], []).append(info["push"])
        assert _complete(str(base / str(version))), version
    assert {k: sorted(v) for k, v in by_publisher.items()} == {"a": [0, 1, 2], "b": [0, 1, 2]}


def test_a_publisher_killed_mid_copy_leaves_no_half_version(saved_model, tmp_path):
    base, go = tmp_path / "serving", tmp_path / "go"
    serving_dir.publish_version(saved_model, str(base), {"publisher": "first"}, copy_dir=shutil.copytree)
    (served,) = serving_dir.list_versions(str(base))

    killed = _publisher(saved_model, base, "killed", 1, go, pause=30)
    go.touch()
    deadline = time.monotonic() + 120
    while not os.path.exists(str(go) + ".copying"):  # the first file of the copy is written
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()[1][-3000:]
        time.sleep(0.1)
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL

    # What the killed publisher left is a hidden staging folder: not a version for any reader.
    leftovers = [name for name in os.listdir(base) if name != str(served)]
    assert leftovers and all(name.startswith(".") for name in leftovers), leftovers
    assert serving_dir.list_versions(str(base)) == [served]
    assert serving_dir.latest_version_dir(str(base)) == str(base / str(served)) and _complete(str(base / str(served)))
    listing = run_cli("models", "--serving-dir", base)
    assert listing.returncode == 0, listing.stderr
    assert str(served) in listing.stdout
    # the killed publisher's copy is removed and said, never listed as a version (issue 56)
    assert f"Removed {len(leftovers)} leftover staging cop" in listing.stdout, listing.stdout
    assert [name for name in os.listdir(base) if name.startswith(".")] == []
    # The next publish is whole and served.
    serving_dir.publish_version(saved_model, str(base), {"publisher": "after"}, copy_dir=shutil.copytree)
    versions = serving_dir.list_versions(str(base))
    assert len(versions) == 2 and versions[0] == served and _complete(str(base / str(versions[1])))
    assert json.loads((base / str(versions[1]) / "push_info.json").read_text())["publisher"] == "after"
