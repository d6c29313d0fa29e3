"""pipeline/quiet.py: what C++ libraries and child processes write to fd 2 goes to the log file."""
import subprocess
import sys
import textwrap

import pytest
from conftest import PROJECT_ROOT
from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor

SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, warnings
    from pipeline import quiet

    with quiet.library_output_to(sys.argv[1], "test"):
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() are written to STDERR\\n")
        subprocess.run([sys.executable, "-c", "import os; os.write(2, b'W0000 op_level_cost_estimator.cc\\\\n')"])
        warnings.warn("You are using a Python version", FutureWarning)
        print("project line", file=sys.stderr)
    os.write(2, b"after restore\\n")
""")


class _UnusedBeamExecutor(BaseBeamExecutor):
    """A TFX Beam executor only constructed (TFX looks the class up by module and name)."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        raise AssertionError("not run")


def test_fd2_output_goes_to_the_log_and_project_lines_to_the_terminal(tmp_path):
    log = tmp_path / "logs" / "library-output.log"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "project line\nafter restore\n"
    logged = log.read_text()
    for noise in ("absl::InitializeLog", "op_level_cost_estimator", "FutureWarning: You are using a Python version"):
        assert noise in logged, logged
    assert "project line" not in logged


def test_verbose_diverts_nothing():
    from pipeline import quiet

    with quiet.unless_verbose(True, None) as path:
        assert path is None


def test_verbose_before_the_command_does_not_reach_tfx_beam_executors_as_absl_flags(monkeypatch, tmp_path):
    """``python -m pipeline -v run`` failed every Beam component with "flag --verbosity=run":
    TFX's BaseBeamExecutor parses sys.argv as absl flags. Run the same parse inside a command."""
    from absl import flags

    from pipeline import cli

    argv = ["python -m pipeline", "-v", "models", "--serving-dir", str(tmp_path)]
    seen = {}

    def command(args):
        seen["argv"] = list(sys.argv)
        _UnusedBeamExecutor(BaseBeamExecutor.Context(beam_pipeline_args=["--direct_num_workers=1"]))
        seen["verbosity"] = flags.FLAGS["verbosity"].value
        return 0

    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setitem(cli.COMMANDS, "models", command)
    assert cli.main() == 0
    assert seen["argv"] == ["python -m pipeline"] and seen["verbosity"] != "models"
    assert sys.argv == argv  # restored for whoever runs next
    # Without hiding the command line, TFX's own parse fails exactly as users saw it.
    with pytest.raises(flags.IllegalFlagValueError, match="verbosity=models"):
        flags.FLAGS(argv, known_only=True)
