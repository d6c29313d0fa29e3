"""The serving directory on an object store (issue 36): the real Pusher publishes two versions to an
``s3://`` base on a local S3 server (moto's, as KFP's bundled MinIO), then ``models``, ``rollback``,
``predict`` and ``generate`` run through the CLI against it. What the bucket holds is read with boto3,
not with the code under test.
"""
import json
import subprocess
import sys
import uuid

import pytest
from conftest import PROJECT_ROOT, run_cli
from support.s3_server import client, keys, process_env, s3_server
from support.tiny_saved_model import save_tiny_saved_model

BUCKET = "models"

# The child pushes as a Kubeflow Pusher step does, through TFX's Pusher executor; tensorflow-io (tfx-1.16) or
# stackenv/s3_filesystem (tfx-1.21) gives tf.io.gfile its s3:// (pipeline/kubeflow/storage.py register_filesystems,
# as a step calls it). It leaves with os._exit: tensorflow-io aborts
# the interpreter at a normal exit (tests/test_kubeflow_storage.py).
_PUSH_TWICE = """
import json, os, sys
import stackenv
from pipeline.kubeflow.storage import register_filesystems
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import proto_utils
from components import pusher

work, base = sys.argv[1:3]   # work/model/Format-Serving: the model the Trainer would have written
register_filesystems(base)
destinations = []
for push in ("first", "second"):
    model = standard_artifacts.Model()
    model.uri = os.path.join(work, "model")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = os.path.join(work, push, "blessing")
    blessing.set_int_custom_property("blessed", 1)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = os.path.join(work, push, "pushed")
    destination = pusher_pb2.PushDestination(filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
    pusher.Executor().Do(
        {standard_component_specs.MODEL_KEY: [model], standard_component_specs.MODEL_BLESSING_KEY: [blessing]},
        {standard_component_specs.PUSHED_MODEL_KEY: [pushed]},
        {standard_component_specs.PUSH_DESTINATION_KEY: proto_utils.proto_to_json(destination)})
    destinations.append(pushed.get_string_custom_property("pushed_destination"))
print(json.dumps(destinations), flush=True)
os._exit(0)
"""


@pytest.fixture
def s3_env(tmp_path):
    with s3_server(BUCKET) as address:
        yield address, process_env(f"http://{address}", home=str(tmp_path))


def _files(address: str, prefix: str) -> dict[str, set[str]]:
    """{top-level name under prefix: its object keys relative to that name}, from the S3 server itself."""
    tree: dict[str, set[str]] = {}
    for key in keys(address, BUCKET, prefix + "/"):
        top, _, rest = key[len(prefix) + 1:].partition("/")
        tree.setdefault(top, set()).add(rest)
    return tree


def test_rollback_on_an_object_store_moves_the_newest_version_aside(s3_env, tmp_path):
    address, env = s3_env
    # moto keeps one store per process, shared by every server a test starts: a folder of this test's own.
    prefix = f"serving-{uuid.uuid4().hex[:8]}/cnn"
    base = f"s3://{BUCKET}/{prefix}"
    save_tiny_saved_model(str(tmp_path / "model" / "Format-Serving"))
    pushed = subprocess.run([sys.executable, "-c", _PUSH_TWICE, str(tmp_path), base], cwd=PROJECT_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    first_dir, second_dir = json.loads(pushed.stdout.strip().splitlines()[-1])
    first, second = int(first_dir.rsplit("/", 1)[1]), int(second_dir.rsplit("/", 1)[1])
    assert first_dir == f"{base}/{first}" and second_dir == f"{base}/{second}" and second > first

    before = _files(address, prefix)
    assert set(before) == {str(first), str(second)}, before  # no staging folder left behind
    assert {"saved_model.pb", "push_info.json"} <= before[str(second)] and before[str(first)] == before[str(second)]
    assert any(name.startswith("variables/") for name in before[str(second)])

    listing = run_cli("models", "--serving-dir", base, env=env, timeout=300)
    assert listing.returncode == 0, listing.stderr[-3000:]
    lines = listing.stdout.splitlines()
    assert lines[1].startswith(f"* {second} ") and lines[2].startswith(f"  {first} "), listing.stdout

    rolled = run_cli("rollback", "--serving-dir", base, env=env, timeout=300)
    assert rolled.returncode == 0, rolled.stderr[-3000:]
    assert (f"Rolled back {base}: version {second} -> {first} is now served (moved {second} to "
            f".rolled-back-{second};") in rolled.stdout, rolled.stdout

    after = _files(address, prefix)
    assert set(after) == {str(first), f".rolled-back-{second}"}, after  # TF Serving now serves `first`
    assert after[str(first)] == before[str(first)] and after[f".rolled-back-{second}"] == before[str(second)]
    info = client(address).get_object(Bucket=BUCKET, Key=f"{prefix}/{first}/push_info.json")["Body"].read()
    assert json.loads(info)["version"] == first

    listing = run_cli("models", "--serving-dir", base, env=env, timeout=300)
    assert listing.returncode == 0, listing.stderr[-3000:]
    versions = [line for line in listing.stdout.splitlines()[1:] if line[:2] in ("* ", "  ") and line[2:3].isdigit()]
    assert versions and versions[0].startswith(f"* {first} ") and len(versions) == 1, listing.stdout

    # predict and generate read the served version from the bucket too: the tiny model has neither
    # family's signature, so each names what it found there (before tensorflow-io was loaded for them,
    # both stopped at "File system scheme 's3' not implemented").
    image = tmp_path / "digit.png"
    from PIL import Image

    Image.new("L", (8, 8), 128).save(image)
    for command in (("predict", "--model-dir", base, str(image)), ("generate", "--model-dir", base, "the list")):
        answer = run_cli(*command, env=env, timeout=300)
        assert answer.returncode != 0 and f"{base}/{first} has no '" in answer.stderr, answer.stderr[-3000:]
        assert "signature; it has [" in answer.stderr and "not implemented" not in answer.stderr, answer.stderr[-3000:]
