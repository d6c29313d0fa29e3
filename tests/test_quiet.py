"""pipeline/quiet.py: what C++ libraries and child processes write to fd 2 goes to the log file."""
import subprocess
import sys
import textwrap

from conftest import PROJECT_ROOT

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
