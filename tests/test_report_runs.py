"""The report names the run it shows and says when the latest run failed (wording and the --require-latest rule)."""
from pipeline.report.runs import ShownRun


def test_latest_run_is_said_to_be_the_latest():
    run = ShownRun("20261122-1", "20261122-1", [], "2026-11-22 10:00:00")
    assert run.is_latest and "Shows run 20261122-1" in run.describe() and "latest run" in run.describe()


def test_a_failed_latest_run_is_named_with_its_failed_component():
    run = ShownRun("20261122-1", "20261122-2", ["ExampleValidator"], "2026-11-22 10:00:00")
    assert not run.is_latest
    assert "The latest run, 20261122-2, failed in ExampleValidator" in run.describe()
    assert "earlier run" in run.describe()


def test_a_failure_inside_the_shown_run_is_not_the_latest_either():
    assert not ShownRun("r1", "r1", ["Pusher"], "t").is_latest


def test_a_run_stopped_before_mlmd_saw_it_marks_the_report_as_not_the_latest_attempt(tmp_path):
    """The run lock's record, written by a real (stopped) exclusive_run, is what the report reads."""
    import pytest

    from pipeline.local.run_lock import exclusive_run
    from pipeline.results.run_outcome import unsuccessful_attempt

    with exclusive_run(str(tmp_path)):
        pass
    assert unsuccessful_attempt(str(tmp_path)) == ""
    with pytest.raises(KeyboardInterrupt), exclusive_run(str(tmp_path)):
        raise KeyboardInterrupt
    attempt = unsuccessful_attempt(str(tmp_path))
    assert "was stopped by SIGINT (Ctrl-C)" in attempt
    run = ShownRun("r1", "r1", [], "t", attempt)
    assert not run.is_latest
    assert "NOT THE LATEST ATTEMPT: The latest attempt, started" in run.describe()
