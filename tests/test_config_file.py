"""``--config FILE`` (pipeline/config_file.py): a YAML file of a command's flags, the typed flags winning,
and one paragraph naming the key and the file for each mistake a file can hold."""
import subprocess
import sys

import pytest
import yaml
from conftest import PROJECT_ROOT

from pipeline.arguments import config_from_args, parse_args
from pipeline.cli import main

DIGEST = "0123456789abcdef" * 4
TEAM = """\
model: cnn
image: registry.example/tfx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
pipeline-root: gs://team-bucket/tfx
epochs: 4
batch_size: 32          # an underscore reads as a dash
no-cache: true
beam-arg: [--direct_num_workers=2, --direct_running_mode=multi_processing]
"""


@pytest.fixture
def team_file(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM)
    return str(path)


def test_a_file_sets_what_its_flags_would(team_file):
    args = parse_args(["compile", "--config", team_file])
    assert (args.image, args.pipeline_root) == (f"registry.example/tfx@sha256:{DIGEST}", "gs://team-bucket/tfx")
    config = config_from_args(args)
    assert (config.model, config.epochs, config.batch_size) == ("cnn", 4, 32)
    assert config.enable_cache is False
    assert config.beam_args == ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def test_flags_typed_on_the_command_line_win(team_file):
    args = parse_args(["compile", f"--config={team_file}", "--batch-size", "8",
                       "--beam-arg=--direct_num_workers=1"])
    config = config_from_args(args)
    assert (config.epochs, config.batch_size) == (4, 8)
    assert config.beam_args == ["--direct_num_workers=1"]  # the typed list replaces the file's
    # --train-steps typed replaces the file's epochs (argparse would refuse both: one group)
    args = parse_args(["compile", "--config", team_file, "--train-steps", "7"])
    assert (args.train_steps, args.epochs) == (7, None)


def test_compile_reads_the_file_end_to_end(team_file, tmp_path):
    package = tmp_path / "pipeline.yaml"
    done = subprocess.run([sys.executable, "-m", "pipeline", "compile", "--config", team_file, "--epochs", "6",
                           "--output", str(package)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(package.read_text())
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert parameters["epochs"]["defaultValue"] == 6  # typed
    assert spec["deploymentSpec"]["executors"]  # and the file's image in every step
    images = {executor["container"]["image"] for executor in spec["deploymentSpec"]["executors"].values()}
    assert images == {f"registry.example/tfx@sha256:{DIGEST}"}


@pytest.mark.parametrize("text,expected", [
    ("epoch: 3\n", ["unknown key `epoch`", "no flag --epoch", "Did you mean `epochs`?"]),
    ("epochs: three\n", ["key `epochs` must be an integer, got 'three'"]),
    ("epochs: 0\n", ["key `epochs`: must be a number from 1 to", "got 0"]),
    ("learning-rate: .nan\n", ["key `learning-rate`: must be a number from", "got nan"]),
    ("model: gpt\n", ["key `model` must be one of cnn, seq2seq, got 'gpt'"]),
    ("no-cache: 1\n", ["key `no-cache` is a switch: write `no-cache: true`"]),
    ("epochs: [1, 2]\n", ["key `epochs` takes one value (--epochs EPOCHS), got a list"]),
    ("epochs:\n", ["key `epochs` needs a value"]),
    ("spans: x\n", ["key `spans` must be N, got 'x'"]),
    ("- epochs\n", ["holds a list, not settings"]),
    ("epochs: [3\n", ["is not valid YAML at line 2"]),
])
def test_a_mistake_in_the_file_is_one_paragraph_naming_the_key_and_the_file(tmp_path, capsys, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["run", "--config", str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --config: {path}") and err.count("\n") == 1, err
    for part in expected:
        assert part in err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main(["compile", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert f"--config {tmp_path / 'absent.yaml'} does not exist" in capsys.readouterr().err
