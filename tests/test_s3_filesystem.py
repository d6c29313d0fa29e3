"""TensorFlow's s3:// filesystem of stackenv/s3_filesystem against a real S3 server (moto's).

On tfx-1.21 it is what every Kubeflow step and `--serving-dir s3://...` command uses; on tfx-1.16
(where tensorflow-io is used instead) the same plugin is built against TensorFlow 2.16's headers and
checked too, so a change to it is caught on both stacks. Each check runs in a child that registers
the plugin and nothing else (no tensorflow-io), as a step's process does, and the S3 server itself
is read with boto3 to see what TensorFlow stored.
"""
import json
import subprocess
import sys
import uuid

import pytest
from conftest import PROJECT_ROOT
from support.s3_server import client, process_env, s3_server

BUCKET = "plugin-bucket"
pytestmark = pytest.mark.timeout(600)

# Everything TFX and TensorFlow do with a store in a run: directories, text, records through tf.data,
# a SavedModel saved and served, renames of files and folders (the Pusher's), copies, appends, deletes.
_EXERCISE = r"""
import json, os, sys
import stackenv
import numpy as np
import tensorflow as tf
from stackenv import s3_filesystem

root = sys.argv[1]
s3_filesystem.register()
s3_filesystem.register()  # idempotent
gfile, seen = tf.io.gfile, {}
gfile.makedirs(root + "/empty/inner")
seen["empty_exists"] = gfile.exists(root + "/empty/inner")
gfile.makedirs(root + "/text")
seen["missing_exists"] = gfile.exists(root + "/missing")
with gfile.GFile(root + "/text/a.txt", "w") as handle:
    handle.write("first line\nsecond line\n")
with gfile.GFile(root + "/text/a.txt", "a") as handle:
    handle.write("appended\n")
with gfile.GFile(root + "/text/a.txt") as handle:
    handle.seek(6)
    seen["partial"] = handle.read(4)
seen["text"] = gfile.GFile(root + "/text/a.txt").read()
seen["is_dir_of_file"] = gfile.isdir(root + "/text/a.txt")
seen["size"] = gfile.stat(root + "/text/a.txt").length
gfile.copy(root + "/text/a.txt", root + "/text/b.txt")
seen["listing"] = sorted(gfile.listdir(root + "/text"))
seen["top"] = sorted(name.rstrip("/") for name in gfile.listdir(root))
seen["glob"] = sorted(gfile.glob(root + "/*/*.txt"))
with tf.io.TFRecordWriter(root + "/records/part-0.tfrecord") as writer:
    for i in range(3000):
        writer.write(b"record %d " % i + b"x" * (i % 97))
from stackenv.s3_filesystem import operations
read_ahead, operations.READ_AHEAD = operations.READ_AHEAD, 1000  # records across many read-ahead windows
read = [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(root + "/records/*.tfrecord"))]
operations.READ_AHEAD = read_ahead
seen["records"] = [len(read), read[0].decode(), read[-1][:11].decode()]
seen["record_lengths_ok"] = all(len(r) == len(b"record %d " % i) + i % 97 for i, r in enumerate(read))
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, kernel_initializer="ones")])
tf.saved_model.save(model, root + "/model/1")
served = tf.saved_model.load(root + "/model/1").signatures["serving_default"]
seen["served"] = [float(v) for v in list(served(tf.constant([[1.0, 2.0, 3.0]])).values())[0].numpy()[0]]
gfile.rename(root + "/model/1", root + "/model/2")
seen["after_folder_rename"] = sorted(gfile.listdir(root + "/model"))
gfile.rename(root + "/text/b.txt", root + "/text/c.txt")
seen["after_file_rename"] = sorted(gfile.listdir(root + "/text"))
errors = {}
for name, call in (("read_missing", lambda: gfile.GFile(root + "/missing.txt").read()),
                   ("remove_missing", lambda: gfile.remove(root + "/missing.txt")),
                   ("rmtree_missing", lambda: gfile.rmtree(root + "/nothing-here")),
                   ("list_missing", lambda: gfile.listdir(root + "/no-such-folder"))):
    try:
        call()
        errors[name] = "no error"
    except tf.errors.OpError as error:
        errors[name] = type(error).__name__
seen["errors"] = errors
gfile.rmtree(root + "/text")
seen["after_rmtree"] = gfile.exists(root + "/text")
print(json.dumps(seen), flush=True)
os._exit(0)
"""


@pytest.fixture(scope="module")
def store():
    with s3_server(BUCKET) as address:
        yield address


def _env(address: str, tmp_path) -> dict[str, str]:
    return process_env(f"http://{address}", home=str(tmp_path))


def test_tensorflow_reads_and_writes_a_bucket_through_the_plugin(store, tmp_path):
    folder = f"run-{uuid.uuid4().hex[:8]}"
    root = f"s3://{BUCKET}/{folder}"
    child = subprocess.run([sys.executable, "-c", _EXERCISE, root], env=_env(store, tmp_path), cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=500)
    assert child.returncode == 0, child.stderr[-4000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    # As tensorflow-io's (tfx-1.16): a folder is the prefix of its objects, so an empty one does not exist.
    assert seen["empty_exists"] is False and seen["missing_exists"] is False
    assert seen["text"] == "first line\nsecond line\nappended\n" and seen["partial"] == "line"
    assert seen["size"] == len("first line\nsecond line\nappended\n") and seen["is_dir_of_file"] is False
    assert seen["listing"] == ["a.txt", "b.txt"]
    assert seen["top"] == ["text"]
    assert seen["glob"] == [f"{root}/text/a.txt", f"{root}/text/b.txt"]
    assert seen["records"] == [3000, "record 0 ", "record 2999"] and seen["record_lengths_ok"] is True
    assert seen["served"] == [6.0, 6.0]  # ones kernel, zero bias: 1 + 2 + 3
    assert seen["after_folder_rename"] == ["2"] and seen["after_file_rename"] == ["a.txt", "c.txt"]
    assert seen["errors"] == {"read_missing": "NotFoundError", "remove_missing": "NotFoundError",
                              "rmtree_missing": "NotFoundError", "list_missing": "NotFoundError"}
    assert seen["after_rmtree"] is False

    # What the store holds, read with boto3: the objects TensorFlow wrote, under their keys.
    keys = {item["Key"][len(folder) + 1:] for page in client(store).get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=folder + "/") for item in page.get("Contents", [])}
    assert {"records/part-0.tfrecord", "model/2/saved_model.pb"} <= keys and not any(k.endswith("/") for k in keys)
    assert not any(key.startswith(("text/", "model/1/")) for key in keys), sorted(keys)
    body = client(store).get_object(Bucket=BUCKET, Key=f"{folder}/records/part-0.tfrecord")["Body"].read()
    assert len(body) == sum(16 + len(b"record %d " % i) + i % 97 for i in range(3000))  # TFRecord framing: 16 bytes


def test_a_store_that_does_not_answer_is_an_error_not_a_hang(tmp_path):
    """Nothing listens at the endpoint: the operation fails with TensorFlow's error (bounded retries), not a
    silent "does not exist" and not a wait without end."""
    script = ("import os, sys, stackenv, tensorflow as tf\nfrom stackenv import s3_filesystem\n"
              "s3_filesystem.register()\n"
              "try:\n    tf.io.gfile.exists('s3://any-bucket/x')\n    print('no error')\n"
              "except tf.errors.OpError as error:\n    print(type(error).__name__, error)\n"
              "sys.stdout.flush(); os._exit(0)\n")
    with s3_server(BUCKET) as address:
        env = _env(address, tmp_path)  # the server stops at the end of the block: its port then refuses
    child = subprocess.run([sys.executable, "-c", script], env=env, cwd=PROJECT_ROOT, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.startswith("UnavailableError") and address.split(":")[-1] in child.stdout, child.stdout


def test_a_plugin_that_cannot_be_built_is_one_paragraph(monkeypatch, tmp_path):
    """No C++ compiler where the plugin must be built (a pip install without `make setup`): a step or command
    that meets an s3:// location says what is missing and how to get it, instead of a compiler's traceback."""
    from stackenv import s3_filesystem
    from stackenv.errors import ProjectError

    from pipeline.kubeflow.storage import register_filesystems

    monkeypatch.setitem(sys.modules, "tensorflow_io", None)  # what a missing package does to `import`
    monkeypatch.setattr(s3_filesystem, "_registered", False)
    monkeypatch.setattr(s3_filesystem, "plugin_path", lambda: str(tmp_path / "plugin.so"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-compiler"))
    register_filesystems('{"uri": "gs://bucket/x"}')  # nothing to load for other schemes
    with pytest.raises(ProjectError) as refused:
        register_filesystems('{"outputs": {"uri": "s3://team-bucket/root/Trainer/model"}, "n": 1}')
    message = str(refused.value)
    assert "(s3://team-bucket/root/Trainer/model) needs TensorFlow's s3:// filesystem" in message
    assert "could not be compiled with" in message and "no-compiler" in message and "apt-get install g++" in message
    assert not list(tmp_path.glob("*.so")), "no half-built plugin is left"


def test_a_tensorflow_call_that_holds_the_gil_while_reading_s3_fails_with_the_reason(store, tmp_path):
    """The TFLite converter keeps Python's GIL while TensorFlow's threads read the SavedModel, and each read
    of the plugin needs the GIL: without a bound that is a hang. The read waits PIPELINE_S3_GIL_WAIT_S seconds,
    then fails with a message naming the cause (on stderr: TensorFlow reports its own symptom); the Pusher
    converts from a local copy (components/tflite_export.py)."""
    script = ("import os, sys, stackenv, tensorflow as tf\nfrom stackenv import s3_filesystem\n"
              "s3_filesystem.register()\nroot = sys.argv[1]\n"
              "model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])\n"
              "tf.saved_model.save(model, root)\n"
              "try:\n    tf.lite.TFLiteConverter.from_saved_model(root).convert()\n    print('converted')\n"
              "except Exception as error:\n    print('failed:', error)\n"
              "sys.stdout.flush(); os._exit(0)\n")
    env = {**_env(store, tmp_path), "PIPELINE_S3_GIL_WAIT_S": "3"}
    child = subprocess.run([sys.executable, "-c", script, f"s3://{BUCKET}/gil-{uuid.uuid4().hex[:8]}/model"],
                           env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.startswith("failed:"), child.stdout[-2000:]
    assert "waited 3 s for Python's GIL" in child.stderr and "Read from a local copy" in child.stderr, \
        child.stderr[-3000:]


def test_the_processes_a_step_starts_get_the_filesystem_too(store, tmp_path):
    """Beam's multi_processing workers of a step (Transform writes through tf.io.gfile) are new interpreters:
    with the step's worker site on PYTHONPATH (pipeline/kubeflow/entrypoint.py) and the variable that
    ``register`` sets, they read s3:// without calling anything themselves."""
    from stackenv import s3_filesystem

    from pipeline.kubeflow.entrypoint import WORKER_SITE

    key = f"worker-{uuid.uuid4().hex[:8]}/data.txt"
    client(store).put_object(Bucket=BUCKET, Key=key, Body=b"for the worker")
    script = ("import os, sys, tensorflow as tf\n"
              "print(tf.io.gfile.GFile(sys.argv[1]).read())\nsys.stdout.flush(); os._exit(0)\n")
    env = _env(store, tmp_path)
    for inherited in ("1", None):
        child_env = {**env, "PYTHONPATH": f"{WORKER_SITE}:{PROJECT_ROOT}"}
        if inherited:
            child_env[s3_filesystem.INHERITED] = inherited
        child = subprocess.run([sys.executable, "-c", script, f"s3://{BUCKET}/{key}"], env=child_env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=300)
        if inherited:
            assert child.returncode == 0 and child.stdout.strip() == "for the worker", child.stderr[-3000:]
        else:  # without the variable nothing is registered: TensorFlow's own answer for an unknown scheme
            assert child.returncode != 0 and "scheme 's3' not implemented" in child.stderr, child.stderr[-3000:]
