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
