"""Bad input through the real CLI: one clear paragraph, non-zero exit, nothing pushed."""
import os

import pytest
from conftest import run_cli
from PIL import Image


def _assert_user_error(result, *must_mention):
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: ")
    for text in must_mention:
        assert str(text) in message, message


def _assert_nothing_served(output):
    assert not os.path.exists(os.path.join(output, "serving"))


def test_help_lists_commands_and_options():
    result = run_cli("run", "--help")
    assert result.returncode == 0
    for option in ("--model", "--data", "--output", "--epochs", "--train-steps", "--runner", "--beam-mode",
                   "--strategy", "--min-accuracy", "--max-regression"):
        assert option in result.stdout


def test_missing_data_path(tmp_path):
    missing = tmp_path / "no-such-folder"
    result = run_cli("run", "--data", missing, "--output", tmp_path / "out")
    _assert_user_error(result, missing)
    _assert_nothing_served(tmp_path / "out")


def test_single_class_folder(tmp_path):
    folder = tmp_path / "images" / "cat"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (10, 12), (i * 40, 10, 10)).save(folder / f"{i}.png")
    result = run_cli("run", "--data", tmp_path / "images", "--output", tmp_path / "out")
    _assert_user_error(result, "cat")
    _assert_nothing_served(tmp_path / "out")


def test_non_image_file_with_image_extension(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / "images" / cls).mkdir(parents=True)
        Image.new("L", (8, 8), 100).save(tmp_path / "images" / cls / "ok.png")
    bad = tmp_path / "images" / "b" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    result = run_cli("run", "--data", tmp_path / "images", "--output", tmp_path / "out")
    _assert_user_error(result, bad)
    _assert_nothing_served(tmp_path / "out")


def test_corrupt_tfrecord(tmp_path, digits_dataset):
    source = os.path.join(digits_dataset.examples_dir, digits_dataset.files[0])
    data = open(source, "rb").read()
    corrupt = tmp_path / "records" / "part.tfrecord.gz"
    corrupt.parent.mkdir()
    corrupt.write_bytes(data[: len(data) // 2])
    result = run_cli("run", "--data", corrupt.parent, "--output", tmp_path / "out")
    _assert_user_error(result, corrupt)
    _assert_nothing_served(tmp_path / "out")


@pytest.mark.parametrize("args, expected", [
    (("--epochs", "0"), "--epochs: must be a number from 1 to 100000, got 0."),
    (("--min-accuracy", "1.5"), "--min-accuracy: must be a number from 0 to 1, got 1.5."),
])
def test_invalid_settings(tmp_path, args, expected):
    """The message names the flag, its range and the value given, not only exit 2."""
    result = run_cli("run", "--output", tmp_path / "out", *args)
    _assert_user_error(result, expected)
    _assert_nothing_served(tmp_path / "out")


def test_predict_without_a_pushed_model(tmp_path):
    image = tmp_path / "x.png"
    Image.new("L", (8, 8)).save(image)
    result = run_cli("predict", "--model-dir", tmp_path / "serving" / "cnn", image)
    _assert_user_error(result, tmp_path / "serving" / "cnn")


def test_deploy_to_an_unreachable_host_fails_fast_with_a_hint(tmp_path):
    import socket
    import time

    package = tmp_path / "p.yaml"
    package.write_text("pipelineInfo: {name: p}\nroot: {}\ndeploymentSpec: {}\ncomponents: {}\nschemaVersion: 2.1.0\n")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    result = run_cli("deploy", "--host", f"http://127.0.0.1:{port}", "--package", package)
    assert time.monotonic() - started < 60
    _assert_user_error(result, f"127.0.0.1:{port}", "port-forward")


def test_logging_configured_in_process_follows_stderr_after_it_is_redirected_and_closed():
    """A command run in-process (a notebook, the KFP step's main) under a stderr that is later
    closed must not turn every later warning into a "--- Logging error ---" traceback."""
    import contextlib
    import io
    import logging

    from pipeline import cli

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        first = io.StringIO()
        with contextlib.redirect_stderr(first):
            cli._configure_logging(verbose=False)
            logging.getLogger("pipeline").warning("while configured")
        first.close()
        second = io.StringIO()
        with contextlib.redirect_stderr(second):
            logging.getLogger("pipeline").warning("after the first stderr closed")
        assert "after the first stderr closed" in second.getvalue()
        assert "Logging error" not in second.getvalue()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
