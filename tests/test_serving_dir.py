"""The TF Serving directory is never left with a partial or unblessed version."""
import os

from stackenv.errors import ProjectError

import pytest
import tensorflow as tf
from conftest import run_cli
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import io_utils, proto_utils

from artifacts import serving_dir
from components import pusher


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A real (tiny) SavedModel in a TFX Model artifact layout: <uri>/Format-Serving."""
    uri = tmp_path_factory.mktemp("model")
    module = tf.Module()
    module.double = tf.function(lambda x: 2 * x, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(uri / "Format-Serving"))
    return str(uri)


def _run_pusher(model_uri: str, base: str, blessed: bool, tmp_path):
    model = standard_artifacts.Model()
    model.uri = model_uri
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    blessing.set_int_custom_property("blessed", int(blessed))
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    destination = pusher_pb2.PushDestination(filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
    pusher.Executor().Do(
        {standard_component_specs.MODEL_KEY: [model], standard_component_specs.MODEL_BLESSING_KEY: [blessing]},
        {standard_component_specs.PUSHED_MODEL_KEY: [pushed]},
        {standard_component_specs.PUSH_DESTINATION_KEY: proto_utils.proto_to_json(destination)})
    return pushed


def test_blessed_model_is_published_complete(saved_model, tmp_path):
    base = str(tmp_path / "serving")
    pushed = _run_pusher(saved_model, base, True, tmp_path)
    (version,) = serving_dir.list_versions(base)
    version_dir = os.path.join(base, str(version))
    assert sorted(os.listdir(base)) == [str(version)]  # no staging leftovers
    assert tf.saved_model.load(version_dir).double(tf.constant([1.5])).numpy().tolist() == [3.0]
    assert serving_dir.read_push_info(version_dir)["version"] == version
    assert pushed.get_int_custom_property("pushed") == 1
    assert pushed.get_string_custom_property("pushed_destination") == version_dir


def test_unblessed_model_is_not_published(saved_model, tmp_path):
    base = str(tmp_path / "serving")
    pushed = _run_pusher(saved_model, base, False, tmp_path)
    assert not os.path.exists(base) or serving_dir.list_versions(base) == []
    assert pushed.get_int_custom_property("pushed") == 0


def test_failure_mid_copy_leaves_no_version_and_no_partial_files(saved_model, tmp_path, monkeypatch):
    base = str(tmp_path / "serving")
    _run_pusher(saved_model, base, True, tmp_path / "first")
    before = sorted(os.listdir(base))

    def copy_then_crash(source, destination, **kwargs):
        os.makedirs(destination, exist_ok=True)
        with open(os.path.join(destination, "saved_model.pb"), "wb") as handle:
            handle.write(b"half a model")
        raise OSError("disk full (injected)")

    monkeypatch.setattr(io_utils, "copy_dir", copy_then_crash)
    with pytest.raises(OSError, match="injected"):
        _run_pusher(saved_model, base, True, tmp_path / "second")
    assert sorted(os.listdir(base)) == before  # the served version untouched, nothing staged left


def test_versions_only_increase_even_if_the_clock_goes_back(tmp_path):
    base = tmp_path / "serving"
    (base / "2000000000").mkdir(parents=True)
    (base / "2000000000" / "saved_model.pb").write_bytes(b"x")
    assert serving_dir.next_version(str(base), now=1_000_000_000) == 2000000001


def test_incomplete_or_hidden_dirs_are_not_versions(tmp_path):
    base = tmp_path / "serving"
    (base / "100").mkdir(parents=True)           # no saved_model.pb: incomplete
    (base / ".incomplete-200-abc").mkdir()
    (base / "300").mkdir()
    (base / "300" / "saved_model.pb").write_bytes(b"x")
    assert serving_dir.list_versions(str(base)) == [300]


def test_models_and_rollback_commands(saved_model, tmp_path):
    base = str(tmp_path / "serving")
    _run_pusher(saved_model, base, True, tmp_path / "a")
    _run_pusher(saved_model, base, True, tmp_path / "b")
    first, second = serving_dir.list_versions(base)
    listing = run_cli("models", "--serving-dir", base)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[1].startswith(f"* {second}") and lines[2].startswith(f"  {first}")

    result = run_cli("rollback", "--serving-dir", base)
    assert result.returncode == 0, result.stderr
    assert f"{second} -> {first}" in result.stdout
    assert serving_dir.list_versions(base) == [first]
    assert os.path.isdir(os.path.join(base, f".rolled-back-{second}"))

    again = run_cli("rollback", "--serving-dir", base)  # nothing older than `first`
    assert again.returncode == 2 and "Nothing to roll back to" in again.stderr


@pytest.mark.parametrize("name", ["²", "٣", "007", "12a", "-5", "9223372036854775808", " 5"])
def test_only_plain_int64_names_are_versions_and_the_rest_is_listed_as_ignored(tmp_path, name):
    base = tmp_path / "serving"
    for entry in (name, "5"):
        (base / entry).mkdir(parents=True)
        (base / entry / "saved_model.pb").write_bytes(b"x")
    assert serving_dir.list_versions(str(base)) == [5]
    assert [entry for entry, _ in serving_dir.ignored_entries(str(base))] == [name]
    assert serving_dir.latest_version_dir(str(base)) == str(base / "5")  # the baseline, predict's pick
    with pytest.raises(ProjectError, match="Nothing to roll back to"):  # never a rollback target
        serving_dir.rollback(str(base))
    listing = run_cli("models", "--serving-dir", base)
    assert listing.returncode == 0, listing.stderr
    assert f"{name!r}: not a version name" in listing.stdout


def test_the_largest_int64_is_a_version(tmp_path):
    (tmp_path / "9223372036854775807").mkdir()
    (tmp_path / "9223372036854775807" / "saved_model.pb").write_bytes(b"x")
    assert serving_dir.list_versions(str(tmp_path)) == [2**63 - 1]


def test_a_rolled_back_number_is_never_pushed_again_and_rollback_never_collides(tmp_path):
    base = tmp_path / "serving"
    for version in (100, 101):
        (base / str(version)).mkdir(parents=True)
        (base / str(version) / "saved_model.pb").write_bytes(b"x")
    assert serving_dir.rollback(str(base))["moved_to"] == ".rolled-back-101"
    assert serving_dir.next_version(str(base), now=50) == 102  # not 101 again
    # A layout from before that rule: 101 pushed again after its rollback, then rolled back again.
    (base / "101").mkdir()
    (base / "101" / "saved_model.pb").write_bytes(b"y")
    moved = serving_dir.rollback(str(base))
    assert moved == {"from": 101, "to": 100, "moved_to": ".rolled-back-101-2"}
    assert (base / ".rolled-back-101" / "saved_model.pb").read_bytes() == b"x"  # the earlier one kept
    assert (base / ".rolled-back-101-2" / "saved_model.pb").read_bytes() == b"y"
    assert serving_dir.list_versions(str(base)) == [100]
