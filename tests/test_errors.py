"""The one error path: every user-facing error is a ProjectError, the CLI prints one paragraph."""
import errno
import os

from stackenv.errors import EXIT_PIPELINE_FAILED, EXIT_USER_ERROR, ConfigError, ProjectError, path_error

import pytest
from conftest import run_cli

from pipeline import cli, failures


def test_every_user_facing_error_is_a_project_error():
    from components.validator import DataAnomaliesError
    from data.errors import DataError
    from pipeline.kubeflow.deploy import DeployError
    from pipeline.kubeflow.training.kube_api import KubeApiError
    from pipeline.kubeflow.training.trainer_launcher import TFJobFailed
    from pipeline.kubeflow.training.tuner_worker import TunerWorkerError
    from pipeline.local.run_lock import OutputDirBusy
    from pipeline.report import ReportError
    from pipeline.results.summary import RecordCountMismatch

    for kind in (DataError, DataAnomaliesError, OutputDirBusy, ReportError, DeployError, RecordCountMismatch,
                 ConfigError, KubeApiError, TFJobFailed, TunerWorkerError):
        assert issubclass(kind, ProjectError), kind


def test_config_errors_name_the_flag():
    from pipeline.config import PipelineConfig

    with pytest.raises(ConfigError) as caught:
        PipelineConfig(batch_size=0)
    assert caught.value.flag == "--batch-size" and "--batch-size" in str(caught.value)
    with pytest.raises(ConfigError, match="--max-regression"):
        PipelineConfig(max_regression=-1)


def test_record_count_mismatch_is_one_paragraph_not_a_traceback(tmp_path, monkeypatch, capsys):
    """A run whose ExampleGen lost records ends with the check's paragraph and exit 1."""
    from pipeline.local import runner as local_runner
    from pipeline.results import summary

    def collect(config, dataset):
        return summary.RunSummary(pipeline_name=config.pipeline_name, components=[],
                                  split_counts={"train": 10, "eval": 3}, num_input_examples=dataset.num_examples,
                                  metric_name="accuracy")

    monkeypatch.setattr(local_runner, "run_local", lambda config, dataset: None)
    monkeypatch.setattr(summary, "collect", collect)
    code = cli.main(["run", "--output", str(tmp_path / "out"), "--accept-schema-change"])
    err = capsys.readouterr().err
    assert code == EXIT_PIPELINE_FAILED, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ExampleGen produced 13 examples") and "--beam-mode in_memory" in last


def test_os_error_on_the_output_path_names_the_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli("run", "--output", blocker / "out", timeout=300)
    assert result.returncode == EXIT_USER_ERROR, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("error: Cannot use the path ") and str(blocker) in message, message
    assert "not a directory" in message


@pytest.mark.parametrize("code, hint", [(errno.EROFS, "read-only"), (errno.EACCES, "permission denied"),
                                        (errno.ENOTDIR, "not a directory")])
def test_os_errors_on_paths_become_a_paragraph(code, hint):
    wrapped = RuntimeError("a library re-raised it")
    wrapped.__cause__ = OSError(code, os.strerror(code), "/data/out/logs")
    error = path_error(wrapped)
    assert error is not None and error.path == "/data/out/logs"
    assert "/data/out/logs" in error.paragraph and hint in error.paragraph.lower()
    assert path_error(RuntimeError("no path involved")) is None


def test_unexpected_error_prints_its_first_line_and_the_log(tmp_path, monkeypatch, capsys):
    def explode(args):
        raise RuntimeError("the first line says what happened\nand this is detail nobody reads")

    monkeypatch.setitem(cli.COMMANDS, "report", explode)
    code = cli.main(["report", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_PIPELINE_FAILED
    assert "RuntimeError: the first line says what happened" in err and "detail nobody reads" not in err
    log_path = err.split("Full traceback: ")[1].split(" ")[0]
    assert log_path.startswith(str(tmp_path / "logs"))
    saved = open(log_path).read()
    assert "Traceback" in saved and "detail nobody reads" in saved


def test_project_error_inside_a_component_is_printed_whole(tmp_path):
    """Beam and TFX wrap an executor's error; the paragraph is found on the chain."""
    from components.validator import DataAnomaliesError
    from pipeline.local.runner import ComponentFailed

    paragraph = "The data does not match the pinned schema.\n  - [eval] feature 'label': new value"
    try:
        try:
            try:
                raise DataAnomaliesError(paragraph)
            except DataAnomaliesError as inner:
                raise ComponentFailed("ExampleValidator", inner) from inner
        except ComponentFailed as failed:
            raise RuntimeError("beam: something wrapped it") from failed
    except RuntimeError as outer:
        message, code = failures.failure_report(outer, str(tmp_path / "logs"))
    assert code == EXIT_PIPELINE_FAILED
    assert message.startswith(f"Component ExampleValidator failed: DataAnomaliesError: {paragraph}\n")
    assert "Full traceback: " + str(tmp_path / "logs") in message
