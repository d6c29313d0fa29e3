"""Hardening 4 (issue 44): files named by flags, file names as they come, outputs beside inputs,
cells a spreadsheet runs, a corpus budget, Kubeflow strings, claims the run did not earn.

Each category has rows run through the real CLI in a subprocess (exit code, no traceback, the
paragraph's key phrase, no signal death, no hang) and unit rows of the one place that fixes it.
Complements ``tests/test_bad_input.py`` and ``tests/test_hostile_inputs.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

from stackenv import user_files

import pytest
from conftest import assert_paragraph, run_cli
from PIL import Image

USER_ERROR = 2



# ---- 1. One way to open a file a flag names -------------------------------------------------------------

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind, make, phrase", [
    ("device", lambda t: Path("/dev/zero"), "is a character device"),
    ("fifo", lambda t: _fifo(t / "pipe"), "is a FIFO"),
    ("directory", lambda t: t, "is a directory"),
])
def test_a_user_file_is_a_regular_file_or_a_paragraph_naming_its_kind(tmp_path, kind, make, phrase):
    path = make(tmp_path)
    with pytest.raises(user_files.UserFileError) as raised:
        user_files.read_user_file(path, flag="--token-file", what="a bearer token",
                                  max_bytes=user_files.SECRET_MAX_BYTES)
    assert raised.value.paragraph.startswith(f"--token-file {path} {phrase}")


def test_a_user_file_over_its_cap_is_refused_unread(tmp_path):
    big = tmp_path / "token"
    big.write_bytes(b"t" * (user_files.SECRET_MAX_BYTES + 1))
    with pytest.raises(user_files.UserFileError, match="more than a bearer token can be"):
        user_files.read_user_file(big, flag="--token-file", what="a bearer token",
                                  max_bytes=user_files.SECRET_MAX_BYTES)
    big.write_bytes(b"t" * user_files.SECRET_MAX_BYTES)
    assert len(user_files.read_user_file(big, flag="--token-file", what="a bearer token",
                                         max_bytes=user_files.SECRET_MAX_BYTES)) == user_files.SECRET_MAX_BYTES


def test_a_user_json_file_that_does_not_parse_names_the_file_and_where(tmp_path):
    path = tmp_path / "push_info.json"
    path.write_text('{"version": 3,\n  "metrics": {')
    with pytest.raises(user_files.UserFileError) as raised:
        user_files.read_user_json(path, flag=None, what="a record")
    assert raised.value.paragraph.startswith(f"{path} is not valid JSON (line 2")


@pytest.mark.parametrize("flag", ["--token-file", "--session-cookie-file", "--dex-password-file", "--ca-bundle"])
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_deploy_login_files_are_checked_before_reading(tmp_path, flag, target):
    package = tmp_path / "pipeline.yaml"
    package.write_text("pipelineInfo: {name: x}\n")
    path = _fifo(tmp_path / "pipe") if target == "fifo" else Path(target)
    extra = ["--dex-user", "a@example.com"] if flag == "--dex-password-file" else []
    result = run_cli("deploy", "--host", "http://127.0.0.1:9", "--package", package, flag, path, *extra, timeout=120)
    assert_paragraph(result, USER_ERROR, f"{flag} {path} is a ", "not a regular file")


def test_deploy_package_and_hyperparameters_are_regular_files(tmp_path):
    result = run_cli("deploy", "--host", "http://127.0.0.1:9", "--package", _fifo(tmp_path / "p.yaml"), timeout=120)
    assert_paragraph(result, USER_ERROR, "is a FIFO")
    result = run_cli("run", "--output", tmp_path / "out", "--hyperparameters", "/dev/zero", timeout=120)
    assert_paragraph(result, USER_ERROR, "--hyperparameters: /dev/zero is a character device")
    assert not (tmp_path / "out" / "serving").exists()


@pytest.fixture(scope="module")
def tflite_model(tmp_path_factory) -> bytes:
    """A real TFLite flatbuffer from TensorFlow's converter (a tiny matmul)."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("tflite-src")
    module = tf.Module()
    module.w = tf.Variable(tf.ones([16, 4]))
    module.f = tf.function(lambda x: {"y": tf.matmul(x, module.w)},
                           input_signature=[tf.TensorSpec([1, 16], tf.float32)])
    tf.saved_model.save(module, str(root), signatures={"serving_default": module.f})
    return tf.lite.TFLiteConverter.from_saved_model(str(root)).convert()


def test_a_damaged_tflite_file_is_named_before_the_native_interpreter_reads_it(tflite_model):
    from models.common import tflite

    assert tflite.flatbuffer_problem(tflite_model) is None
    assert tflite.interpreter(tflite_model).get_signature_runner().get_output_details()["y"]["shape"].tolist() == [1, 4]
    for cut in (0, 7, 100, len(tflite_model) // 2, len(tflite_model) - 1):
        assert tflite.flatbuffer_problem(tflite_model[:cut]), cut
        with pytest.raises(tflite.DamagedTflite):
            tflite.interpreter(tflite_model[:cut])


def test_predict_tflite_on_a_truncated_file_prints_a_paragraph_not_a_signal(tmp_path, tflite_model):
    version = tmp_path / "serving" / "cnn" / "5"
    (version / "tflite").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"x")
    (version / "tflite" / "model_float16.tflite").write_bytes(tflite_model[: len(tflite_model) // 2])
    Image.new("L", (8, 8), 100).save(tmp_path / "x.png")
    result = run_cli("predict", "--model-dir", version.parent, "--tflite", tmp_path / "x.png", timeout=300)
    assert_paragraph(result, USER_ERROR, f"Cannot run the TFLite model {version}/tflite/model_float16.tflite",
                      "truncated or corrupt")


def test_models_names_a_damaged_push_info_and_a_version_serving_cannot_load(tmp_path):
    base = tmp_path / "serving" / "cnn"
    for version in ("4", "5"):
        (base / version).mkdir(parents=True)
    (base / "5" / "saved_model.pb").write_bytes(b"\x00" * 100)
    (base / "5" / "push_info.json").write_text('{"metrics": {"accuracy": 0.9')
    import tensorflow as tf

    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(base / "4"))
    result = run_cli("models", "--serving-dir", base, timeout=300)
    assert_paragraph(result, 0, f"{base}/5/push_info.json is not valid JSON (line 1",
                      "TF Serving cannot load this version: saved_model.pb (100 bytes)",
                      "warning: the served version 5 is damaged")
    assert result.stdout.count("TF Serving cannot load this version") == 1  # version 4 is whole


# ---- 2. File names that are not UTF-8 -------------------------------------------------------------------

LATIN1_NAME = b"caf\xe9"          # a name written by a system whose file names are Latin-1


def _bytes_name(folder: Path, name: bytes) -> Path:
    """``folder/name`` for a name as raw bytes (how os.listdir returns it: surrogate escapes)."""
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


def test_printable_names_show_each_byte_that_is_not_utf8():
    from data import walk

    raw = os.fsdecode(LATIN1_NAME + b".txt")
    assert walk.not_utf8(raw) and not walk.not_utf8("café.txt")
    assert walk.printable(raw) == "caf\\xe9.txt"
    assert walk.printable("café.txt") == "café.txt"
    assert walk.fs_bytes(raw) == LATIN1_NAME + b".txt"


def _two_classes(root: Path, odd: bytes | None = None) -> Path:
    import numpy as np

    for label, base in (("dark", 30), ("light", 220)):
        (root / label).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.full((8, 8, 3), base + i, np.uint8)).save(root / label / f"{i}.png")
    if odd:
        Image.fromarray(np.full((8, 8, 3), 40, np.uint8)).save(_bytes_name(root / "dark", odd))
    return root


def test_image_folder_reads_counts_and_names_a_file_whose_name_is_not_utf8(tmp_path):
    from components.ingest_config import tree_fingerprint
    from data.images.listing import Unused, list_class_files, unused_line

    root = _two_classes(tmp_path / "img", LATIN1_NAME + b".png")
    unused = Unused()
    per_class = list_class_files(str(root), unused)
    assert len(per_class["dark"]) == 7 and len(per_class["light"]) == 6
    line = unused_line(unused.facts())
    assert "1 file" in line and f"{root}/dark/caf\\xe9.png" in line
    before = tree_fingerprint(str(root))
    _bytes_name(root / "dark", LATIN1_NAME + b".png").rename(_bytes_name(root / "dark", b"cafe\xe8.png"))
    assert tree_fingerprint(str(root)) != before


def test_a_class_folder_whose_name_is_not_utf8_is_a_printable_class(tmp_path):
    from data.images.listing import list_class_files

    root = _two_classes(tmp_path / "img")
    (root / "light").rename(_bytes_name(root, b"l\xe9ger"))
    assert sorted(list_class_files(str(root))) == ["dark", "l\\xe9ger"]


def test_text_folder_reads_a_document_whose_name_is_not_utf8(tmp_path):
    from support.example_gen_helpers import recorded_facts, run_example_gen
    from tfx.components.example_gen import utils
    from tfx.proto import example_gen_pb2
    from tfx.types import standard_component_specs as keys
    from tfx.utils import proto_utils

    from components.ingest_config import WHOLE_FOLDER, settings_config
    from components.ingest_driver import resolve_input
    from components.text_example_gen import TextExampleGenExecutor, input_config
    from data.text_corpus import CorpusFacts

    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jumbled boxing".split()
    source = tmp_path / "docs"
    source.mkdir()
    for i in range(4):
        (source / f"d{i}.txt").write_text(" ".join(words[(j * 3 + i) % len(words)] for j in range(80)))
    _bytes_name(source, LATIN1_NAME + b".txt").write_text(" ".join(words * 6))
    config = proto_utils.proto_to_json(input_config(WHOLE_FOLDER))
    resolved = resolve_input({keys.INPUT_BASE_KEY: str(source), keys.INPUT_CONFIG_KEY: config})
    assert "tree:files=5," in resolved[utils.FINGERPRINT_PROPERTY_NAME]
    splits = run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "out",
                             output_config=example_gen_pb2.Output(),
                             input_config=input_config(WHOLE_FOLDER),
                             custom_config=settings_config(context_words=6, target_words=2, stride=2))
    assert sum(map(len, splits.values())) > 0
    corpus = CorpusFacts.from_json(recorded_facts(tmp_path / "out")["corpus"])
    assert corpus.documents == 5 and corpus.not_utf8_names == ["caf\\xe9.txt"]
    assert "1 read under a file name that is not UTF-8 (each such byte shown as \\xNN): caf\\xe9.txt" in \
        corpus.describe()


@pytest.mark.slow
def test_a_run_and_its_scoring_read_names_that_are_not_utf8(tmp_path):
    """The whole pipeline (ImportExampleGen died with UnicodeEncodeError, and --score in the graph build)."""
    root = _two_classes(tmp_path / "img", LATIN1_NAME + b".png")
    score = tmp_path / "score"
    score.mkdir()
    Image.new("RGB", (8, 8), (30, 30, 30)).save(_bytes_name(score, b"\xff.png"))
    # The subject is the names, not the gate: --score needs a blessed model, and whether a 2-step model on 6 eval
    # images clears the default gate depends on the machine (issue 58: 0.6667 against 0.8434 on one, passed on
    # another). --min-accuracy 0 and --gate-margin -1 leave no bar, so the run is blessed wherever it runs.
    result = run_cli("run", "--data", root, "--output", tmp_path / "out", "--train-steps", "2", "--min-accuracy", "0",
                     "--gate-margin", "-1", "--score", score, timeout=600)
    assert_paragraph(result, 0, "Examples: 13 in", f"1 file: {root}/dark/caf\\xe9.png",
                      "1 scored under a file name that is not UTF-8 (each such byte shown as \\xNN): \\xff.png")


# ---- 3. An output folder and a data or score folder that contain each other ------------------------------

def _texts(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.txt").write_text("some words of a document " * 40)
    return folder


@pytest.mark.parametrize("row, argv, phrase", [
    ("output-inside-data", lambda t: ["--model", "seq2seq", "--data", _texts(t / "docs"),
                                      "--output", t / "docs" / "out"],
     "--output: {tmp}/docs/out is inside the --data folder {tmp}/docs"),
    ("output-is-data", lambda t: ["--data", _two_classes(t / "img"), "--output", t / "img"],
     "--output: {tmp}/img is the --data folder {tmp}/img"),
    ("output-linked-into-data", lambda t: ["--data", _two_classes(t / "img"), "--output",
                                          (t / "link").symlink_to(t / "img" / "dark") or t / "link"],
     "--output: {tmp}/link is inside the --data folder {tmp}/img"),
    ("score-is-output", lambda t: ["--data", _two_classes(t / "img"), "--output", t / "out", "--score", t / "out"],
     "--output: {tmp}/out is the --score folder {tmp}/out"),
    ("score-inside-output", lambda t: ["--data", _two_classes(t / "img"), "--output", t / "out",
                                       "--score", t / "out" / "serving"],
     "--score: {tmp}/out/serving is inside --output"),
    ("data-inside-output", lambda t: ["--data", _two_classes(t / "out" / "img"), "--output", t / "out"],
     "--data: {tmp}/out/img is inside --output {tmp}/out"),
])
def test_an_output_beside_its_inputs_is_refused_before_anything_is_written(tmp_path, row, argv, phrase):
    args = argv(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    result = run_cli("run", "--train-steps", "2", *args, timeout=300)
    assert_paragraph(result, USER_ERROR, phrase.format(tmp=tmp_path), "Nothing was written")
    assert sorted(tmp_path.rglob("*")) == before


def test_the_prepared_data_cache_may_be_read_as_data(tmp_path):
    from pipeline.config import check_inputs_beside_output

    cache = tmp_path / "out" / "data" / "abc123"
    cache.mkdir(parents=True)
    check_inputs_beside_output(str(tmp_path / "out"), str(cache), None)  # no error


def test_an_empty_class_folder_is_never_advised_deleted(tmp_path):
    from data.errors import DataError
    from data.images.listing import list_class_files

    root = _two_classes(tmp_path / "img")
    (root / "notes").mkdir()
    with pytest.raises(DataError) as raised:
        list_class_files(str(root))
    assert "move the folder out of the data folder" in str(raised.value)
    assert "remove" not in str(raised.value) and "delete" not in str(raised.value)


# ---- 4. Cells a spreadsheet runs; Markdown that a viewer renders ------------------------------------------

HOSTILE = ["=1+2.png", "+SUM(A1)", "-2+3", "@cmd", "\tx.png", "\rx.png", '=HYPERLINK("http://x","y")',
           "plain.png", "<img src=x onerror=alert(1)>"]


def test_scores_csv_cells_are_neutralised_as_owasp_asks_and_parquet_keeps_the_value(tmp_path):
    import csv

    import pyarrow.parquet as pq

    from components.scoring import CSV_FILE, PARQUET_FILE, write_tables

    rows = [{"file": name, "prediction": "=cmd|' /C calc'!A0", "score": 0.5, "scores": [0.5, 0.5],
             "error": None} for name in HOSTILE]
    write_tables(rows, str(tmp_path))
    with open(tmp_path / CSV_FILE, newline="") as handle:
        read = list(csv.DictReader(handle))
    formula = ("=", "+", "-", "@", "\t", "\r")
    for row, name in zip(read, HOSTILE):
        assert not row["file"].startswith(formula) and not row["prediction"].startswith(formula)
        assert row["file"] == (f"'{name}" if name.startswith(formula) else name)
        assert row["prediction"] == "'=cmd|' /C calc'!A0" and row["score"] == "0.5"
    assert pq.read_table(tmp_path / PARQUET_FILE).column("file").to_pylist() == HOSTILE


def test_model_card_markdown_renders_user_strings_as_text():
    import markdown

    from components.model_card import to_markdown

    evil = "<img src=x onerror=alert(1)>"
    blocks = [("h1", f"Model card: {evil}"), ("p", "# not a heading *nor bold* [link](javascript:x)"),
              ("ul", [f"class {evil}", "1. not a list", "a\n# b"]),
              ("table", ["class", "accuracy"], [[evil, "0.9"], ["a|b", "1.0"]])]
    rendered = markdown.markdown(to_markdown(blocks), extensions=["tables"])
    assert "<img" not in rendered and "<a " not in rendered and "<em>" not in rendered
    assert "<h1>" in rendered and rendered.count("<h1>") == 1 and "<ol>" not in rendered
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert "<td>a|b</td>" in rendered  # the pipe stays in its cell


# ---- 6. Kubeflow strings that compile but cannot work ------------------------------------------------------

KFP_IMAGE = "registry.example.com/team/tfx-project:1.0"


def _compile_cli(tmp_path: Path, *flags: object):
    return run_cli("compile", "--image", KFP_IMAGE, "--pipeline-root", "gs://bucket/tfx", "--output",
                   tmp_path / "p.yaml", *flags, timeout=300)


@pytest.mark.parametrize("flags, phrase", [
    (("--env", "AWS_SECRET_ACCESS_KEY=abc123"), "--secret-env AWS_SECRET_ACCESS_KEY=SECRET:KEY"),
    (("--env", "Trainer/DB_PASSWORD=hunter2"), "--secret-env Trainer/DB_PASSWORD=SECRET:KEY"),
    (("--env", "GITHUB_TOKEN=ghp_x"), "GITHUB_TOKEN looks like a secret"),
    (("--secret-env", "X=sec:key:extra"), "'key:extra' is not a valid key of a Kubernetes secret"),
    (("--secret-env", "X=sec:a key"), "'a key' is not a valid key of a Kubernetes secret"),
    (("--score", "{tmp}"), "compile: --score {tmp} is a local path (it exists on this machine)"),
    (("--data", "{tmp}/images"), "compile: --data {tmp}/images is a local path"),
])
def test_kubeflow_strings_that_cannot_work_are_refused_at_compile(tmp_path, flags, phrase):
    result = _compile_cli(tmp_path, *(str(f).format(tmp=tmp_path) for f in flags))
    assert_paragraph(result, USER_ERROR, phrase.format(tmp=tmp_path))
    assert "abc123" not in result.stderr and "hunter2" not in result.stderr  # the secret is not echoed
    assert not (tmp_path / "p.yaml").exists()


def test_plain_env_names_secret_keys_and_image_paths_still_compile():
    from pipeline.kubeflow.k8s_grammar import SECRET_KEY
    from pipeline.kubeflow.platform import StepSettings, looks_secret
    from pipeline.kubeflow.storage import check_cluster_input

    for name in ("LOG_LEVEL", "TOKENIZERS_PARALLELISM", "GOOGLE_APPLICATION_CREDENTIALS", "TF_CPP_MIN_LOG_LEVEL"):
        assert not looks_secret(name), name
    settings = StepSettings(env=["LOG_LEVEL=debug"], secret_env=["DB_PASSWORD=db-creds:password",
                                                                  "K=creds:tls.crt", "J=creds:.dockerconfigjson"])
    assert settings.parsed_env() == {None: {"LOG_LEVEL": "debug"}}
    assert {k for pairs in settings.parsed_secret_env()[None].values() for k, _ in pairs} == {
        "password", "tls.crt", ".dockerconfigjson"}
    assert all(SECRET_KEY.fullmatch(k) for k in ("a-b_c.d", "0"))
    for path in ("gs://bkt/x", "s3://bkt/x", "minio://mlpipeline/x", "/opt/tfx-data/data/abc", None):
        check_cluster_input(path, "--data", "compile")


# ---- 5. A budget of decompressed text for the whole corpus ------------------------------------------------

def _gzip_corpus(folder: Path, files: int, mib_each: float) -> Path:
    """``files`` gzip files of ``mib_each`` MiB of real words each (a few KB compressed)."""
    import gzip

    folder.mkdir(parents=True)
    line = b"the quick brown fox jumps over a lazy dog while seven wizards quietly hex\n"
    for i in range(files):
        (folder / f"part{i}.txt.gz").write_bytes(gzip.compress(line * int(mib_each * 2**20 / len(line)), 9))
    return folder


def test_the_prepare_path_stops_at_the_corpus_budget_naming_the_file_and_flag(tmp_path):
    from data.errors import DataError
    from data.text import prepare_text_dataset

    source = _gzip_corpus(tmp_path / "docs", 3, 0.6)  # each file is under the budget, all three are not
    with pytest.raises(DataError) as raised:
        prepare_text_dataset(str(source), tmp_path / "cache", max_text_mb=1)
    message = str(raised.value)
    assert "more than --max-text-mb 1 MiB once decompressed" in message and "part1.txt.gz reached" in message
    assert "--max-text-mb 4" in message and not (tmp_path / "cache").exists() or not any(
        (tmp_path / "cache").rglob("*.tfrecord*"))
    assert prepare_text_dataset(str(source), tmp_path / "cache2", max_text_mb=2).num_examples > 0


@pytest.mark.parametrize("files, mib_each, phrase", [(3, 0.6, "(the largest)"), (1, 1.5, "part0.txt.gz (alone)")])
def test_the_example_gen_stops_at_the_corpus_budget_naming_the_file_and_flag(tmp_path, files, mib_each, phrase):
    from stackenv.errors import find_in_chain

    from support.example_gen_helpers import run_example_gen
    from tfx.proto import example_gen_pb2

    from components.ingest_config import WHOLE_FOLDER, settings_config
    from components.text_example_gen import TextExampleGenExecutor, input_config
    from data.errors import DataError

    source = _gzip_corpus(tmp_path / "docs", files, mib_each)
    with pytest.raises(Exception) as raised:
        run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "out", output_config=example_gen_pb2.Output(),
                        input_config=input_config(WHOLE_FOLDER),
                        custom_config=settings_config(context_words=6, target_words=2, stride=2, max_text_mb=1))
    error = find_in_chain(raised.value, DataError)
    assert error is not None, raised.value
    assert "more than --max-text-mb 1 MiB once decompressed" in str(error) and phrase in str(error)


# ---- 7. Claims the run did not earn, and commands that do not coordinate ----------------------------------

def test_train_steps_runs_exactly_that_many_optimizer_steps(tmp_path):
    """20 steps spread over 8 epochs ran ceil(20 / 8) * 8 = 24; the optimizer's own count is the oracle."""
    import logging
    import types

    import numpy as np
    import tensorflow as tf

    from models.common.training import TrainingSettings, fit

    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 2), "float32"), np.ones((8, 1), "float32"))).batch(2)
    for epochs, steps in ((8, 20), (3, 20), (1, 20), (5, 3)):
        before = int(model.optimizer.iterations.numpy())
        args = types.SimpleNamespace(train_steps=steps, eval_steps=1, model_run_dir=str(tmp_path / f"{epochs}"))
        history = fit(TrainingSettings(epochs=epochs), model, data.repeat(), data, args, logging.getLogger("t"))
        assert int(model.optimizer.iterations.numpy()) - before == steps, (epochs, steps)
        assert "val_loss" in history.history  # the end-of-training validation still ran


def test_generate_refuses_top_k_zero_and_echoes_no_terminal_escapes(tmp_path):
    from pipeline.cli import terminal_text

    result = run_cli("generate", "--model-dir", tmp_path, "--top-k", "0", "x", timeout=120)
    assert_paragraph(result, USER_ERROR, "--top-k: must be >= 1 (1 = greedy), got 0.")
    assert terminal_text("\x1b[2J\x1b]0;owned\x07hello \x1b[31mworld\x1b[0m\nnext\x9b") == "hello world next "
    assert terminal_text("plain words, tabs\tkept") == "plain words, tabs\tkept"


def test_rollback_waits_for_a_run_that_holds_the_output(tmp_path):
    import fcntl

    base = tmp_path / "out" / "serving" / "cnn"
    for version in ("1", "2"):
        (base / version).mkdir(parents=True)
        (base / version / "saved_model.pb").write_bytes(b"x")
    lock = tmp_path / "out" / ".run.lock"
    lock.write_text('{"pid": 1, "started": "now", "outcome": "running"}\n')
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a run in progress (pipeline/local/run_lock.py takes this lock)
        result = run_cli("rollback", "--serving-dir", base, timeout=120)
        assert_paragraph(result, USER_ERROR, f"A pipeline run is using {tmp_path / 'out'}", "nothing was rolled back")
        assert sorted(os.listdir(base)) == ["1", "2"]
    result = run_cli("rollback", "--serving-dir", base, timeout=120)
    assert_paragraph(result, 0, "version 2 -> 1 is now served")
    assert lock.read_text().startswith('{"pid": 1')  # the run's record is left as it was


def test_the_summary_claims_no_comparison_it_did_not_make():
    from pipeline.results.summary import RunSummary, SliceMetric, _regression_text

    summary = RunSummary("p", [], {}, 0, "accuracy")
    assert _regression_text(summary, 0.01) == "; no model was served before, so none to compare with"
    summary.baseline_skipped = "the served model could not be loaded"
    assert "not compared with the served model" in _regression_text(summary, 0.01)
    assert "below the served model" not in _regression_text(summary, 0.01)
    summary.baseline_overall = SliceMetric("overall", 0.9, 100)
    assert _regression_text(summary, 0.01) == ", at most 0.01 below the served model (0.9000)"


def test_a_symlink_leaving_the_data_folder_is_named_and_followed_only_with_the_flag(tmp_path):
    from data.images.listing import Unused, list_class_files, unused_line
    from data.text_files import list_text_files

    elsewhere = _two_classes(tmp_path / "elsewhere")
    root = _two_classes(tmp_path / "img")
    (root / "dark" / "secret.png").symlink_to(elsewhere / "dark" / "0.png")
    (root / "dark" / "inside.png").symlink_to(root / "light" / "0.png")  # stays inside: read as before
    (root / "other").symlink_to(elsewhere / "light")                     # a whole class from elsewhere
    unused = Unused()
    per_class = list_class_files(str(root), unused)
    assert sorted(per_class) == ["dark", "light"] and len(per_class["dark"]) == 7
    line = unused_line(unused.facts())
    assert f"{root}/dark/secret.png (symlink to {elsewhere}/dark/0.png, outside the folder: not read " \
           "(--follow-links reads it))" in line and f"{root}/other (symlink to {elsewhere}/light" in line
    followed = list_class_files(str(root), Unused(), follow_links=True)
    assert sorted(followed) == ["dark", "light", "other"] and len(followed["dark"]) == 8

    docs = _texts(tmp_path / "docs")
    (tmp_path / "private.txt").write_text("not for training " * 20)
    (docs / "notes.txt").symlink_to(tmp_path / "private.txt")
    files, skipped = list_text_files(str(docs), True)
    assert [f.relative for f in files] == ["a.txt"]
    assert [(s.document, s.reason) for s in skipped] == [("notes.txt", "outside")]
    files, skipped = list_text_files(str(docs), True, follow_links=True)
    assert sorted(f.relative for f in files) == ["a.txt", "notes.txt"] and not skipped


def test_follow_links_is_a_run_flag():
    result = run_cli("run", "--help", timeout=120)
    assert "--follow-links" in result.stdout


def test_a_symlink_leaving_the_score_folder_is_named_and_followed_only_with_the_flag(tmp_path):
    from data.scoring import list_inputs

    elsewhere, score = tmp_path / "elsewhere", tmp_path / "score"
    elsewhere.mkdir()
    score.mkdir()
    (elsewhere / "secret.txt").write_text("outside the folder")
    (score / "inside.txt").write_text("to score")
    os.symlink(elsewhere / "secret.txt", score / "link.txt")
    files, problems = list_inputs(str(score))
    assert [f.relative for f in files] == ["inside.txt"]
    assert [p.relative for p in problems] == ["link.txt"] and str(elsewhere / "secret.txt") in problems[0].detail
    files, problems = list_inputs(str(score), follow_links=True)
    assert sorted(f.relative for f in files) == ["inside.txt", "link.txt"] and not problems
