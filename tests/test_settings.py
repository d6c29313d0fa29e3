"""Run settings are declared once (pipeline/settings.py): the flag, its help, its range check and the docs'
table all come from that one declaration, for the pipeline's settings and the families' own."""
import dataclasses
import subprocess
import sys

from stackenv.errors import ConfigError

import pytest
from conftest import PROJECT_ROOT

from pipeline.arguments import build_parser, config_from_args
from pipeline.config import PipelineConfig
from pipeline.settings import runtime_settings, setting, settings_table


@dataclasses.dataclass
class WithDropout(PipelineConfig):
    """PipelineConfig with one more setting, declared the only way a setting is declared."""

    dropout: float = setting(0.1, flag="--dropout", low=0.0, high=0.9, help="dropout rate of the hidden layers",
                             runtime=True)



def test_a_new_setting_is_one_declaration(capsys):
    parser = build_parser(WithDropout)
    for command in ("run", "compile", "tfjob"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert "--dropout DROPOUT dropout rate of the hidden layers (0 to 0.9; default: 0.1)" in shown, command
    with pytest.raises(SystemExit):
        parser.parse_args(["prepare", "--dropout", "0.2"])  # prepare only converts data: not its setting
    capsys.readouterr()

    assert config_from_args(parser.parse_args(["run", "--dropout", "0.3"]), WithDropout).dropout == 0.3
    assert config_from_args(parser.parse_args(["run"]), WithDropout).dropout == 0.1
    compiled = parser.parse_args(["compile", "--image", "img", "--pipeline-root", "gs://b/r", "--dropout", "0.2"])
    assert config_from_args(compiled, WithDropout).dropout == 0.2

    with pytest.raises(ConfigError) as refused:
        config_from_args(parser.parse_args(["run", "--dropout", "1.5"]), WithDropout)
    assert str(refused.value) == "--dropout: must be a number from 0 to 0.9, got 1.5."
    with pytest.raises(ConfigError, match="--dropout: must be a number from 0 to 0.9, got nan"):
        WithDropout(dropout=float("nan"))

    assert ("| `--dropout` | 0 to 0.9 | `0.1` | compile, run, tfjob (Kubeflow runtime parameter) | "
            "dropout rate of the hidden layers |") in settings_table([("", WithDropout)]).splitlines()
    assert [field.name for field, _ in runtime_settings(WithDropout)][-1] == "dropout"


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "1000000000000"], "--batch-size: must be a number from 1 to 65536, got 1000000000000."),
    (["--seed", "99999999999"], "--seed: must be a number from 0 to 2147483647, got 99999999999."),
    (["--learning-rate", "inf"], "--learning-rate: must be a number from 1e-09 to 10, got inf."),
    (["--min-accuracy", "1.5"], "--min-accuracy: must be a number from 0 to 1, got 1.5."),
    (["--model", "seq2seq", "--context-words", "0"], "--context-words: must be a number from 1 to 512, got 0."),
    (["--image-size", "1"], "--image-size: must be a number from 2 to 4096, got 1."),
])
def test_out_of_range_values_name_the_flag_the_value_and_the_range(argv, message):
    with pytest.raises(ConfigError) as refused:
        config_from_args(build_parser().parse_args(["run", *argv]))
    assert str(refused.value) == message


def test_a_choice_given_in_code_is_checked_as_on_the_command_line():
    with pytest.raises(ConfigError, match="--beam-mode: must be one of auto, in_memory, multi_processing, "
                                          "got 'fast'"):
        PipelineConfig(beam_mode="fast")


def test_the_docs_settings_table_is_the_declarations():
    written = (PROJECT_ROOT / "docs" / "settings.md").read_text()
    generated = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'scripts'); "
                                "import write_settings_table as w; print(w.document(), end='')"],
                               cwd=PROJECT_ROOT, capture_output=True, text=True, check=True).stdout
    assert written == generated, "docs/settings.md is stale: run .venv/bin/python scripts/write_settings_table.py"
    for flag in ("--epochs", "--gate-margin", "--vocab-size", "--image-size", "--trainer-workers", "--trainer-gpus"):
        assert f"| `{flag}` |" in written


#: Flags that are a command's own arguments (where it writes), not settings of what it builds or deploys.
COMMAND_ARGUMENTS = {"run": {"--output", "--accept-schema-change"}, "prepare": {"--output"},
                     "tfjob": {"--output", "--to"}, "compile": set(), "deploy": set()}


def test_every_flag_of_the_pipeline_and_kubeflow_commands_is_a_declared_setting():
    """One declaration mechanism: run, pod, compile, TFJob and deploy flags all come from ``setting`` fields, so
    each has its range checked, its type seen by mypy and its row in docs/settings.md."""
    import argparse

    from pipeline import families
    from pipeline.kubeflow.compile_settings import CompileTarget
    from pipeline.kubeflow.deploy_settings import DeploySettings, LoginSettings
    from pipeline.kubeflow.platform import StepSettings
    from pipeline.kubeflow.training.tfjob import TFJobSettings
    from pipeline.settings import declared

    declarations = [PipelineConfig, *(f.settings_type for f in families.FAMILIES.values()), StepSettings,
                    CompileTarget, TFJobSettings, DeploySettings, LoginSettings]
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, own in COMMAND_ARGUMENTS.items():
        declared_here = {spec.flag for settings_type in declarations for _, spec in declared(settings_type)
                         if command in spec.commands}
        flags = {option for action in subparsers.choices[command]._actions for option in action.option_strings
                 if option.startswith("--")} - {"--help", "--config"}
        assert flags - declared_here == own, (command, sorted(flags - declared_here - own))
