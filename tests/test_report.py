"""pipeline/report/ against a real pipeline output, and its HTML in a real headless Chromium.

The expected values come straight from ``tfma.load_eval_result`` and MLMD, not from the
code under test. One output dir (two runs) is shared with test_notebook.py.
"""
import html
import io
import json
import shutil
from pathlib import Path

from stackenv.tfma import tfma

import pytest
from support.headless_chromium import ChromiumNotFound, chromium_page, find_chromium
from support.pipeline_runs import ARTIFACTS_DIR, PIPELINE_NAME, cnn_run_with_baseline  # noqa: F401

from pipeline import graph, report
from pipeline.results import mlmd

pytestmark = pytest.mark.e2e

ACCURACY = "sparse_categorical_accuracy"
EXPECTED_SLICES = ({"overall"} | {f"label={d}" for d in range(10)}
                   | {f"brightness={b}" for b in ("dark", "medium", "bright")})

# Runs in the page: waits until every image is decoded, then reports what a reader sees.
PAGE_CHECK = """(async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const table = document.getElementById('slice-metrics');
  return {
    readyState: document.readyState,
    title: document.title,
    sliceRows: table ? [...table.tBodies[0].rows].map(r => r.cells[0].textContent) : null,
    tableHeight: table ? table.getBoundingClientRect().height : 0,
    blessing: (document.getElementById('blessing') || {}).textContent,
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete,
                                             width: i.naturalWidth, height: i.naturalHeight})),
  };
})()"""


def _slice_name(slice_key) -> str:
    return "overall" if not slice_key else ", ".join(f"{k}={v}" for k, v in slice_key)


def _tfma_metrics(uri: str, model_name: str, sub_key: str = ""):
    """{slice: {metric: value}} read with TFMA's own loader."""
    result = tfma.load_eval_result(uri, model_name=model_name)
    return {_slice_name(key): {m: float(v["doubleValue"]) for m, v in by_output[""][sub_key].items()
                               if "doubleValue" in v}   # NaN comes as the string "NaN"
            for key, by_output in result.slicing_metrics}


@pytest.fixture(scope="module")
def evaluation(cnn_run_with_baseline):
    return report.find_latest_evaluation(str(cnn_run_with_baseline))


@pytest.fixture(scope="module")
def written_report(cnn_run_with_baseline, tmp_path_factory):
    html_path = report.write_report(str(cnn_run_with_baseline), str(tmp_path_factory.mktemp("report") / "report.html"))
    ARTIFACTS_DIR.mkdir(exist_ok=True)
    shutil.copy(html_path, ARTIFACTS_DIR / "report.html")
    return html_path


def test_finds_the_latest_evaluation_through_mlmd(cnn_run_with_baseline, evaluation):
    store = mlmd.open_store(mlmd.sqlite_config(str(cnn_run_with_baseline / "metadata.sqlite")))
    latest = mlmd.latest_node_execution(store, PIPELINE_NAME, graph.EVALUATOR)
    assert evaluation.uri == latest.outputs["evaluation"][0].uri
    assert (evaluation.pipeline_name, evaluation.family) == (PIPELINE_NAME, "cnn")
    assert evaluation.has_baseline and evaluation.blessed is False and evaluation.pushed_path is None
    assert report.find_latest_evaluation(str(cnn_run_with_baseline), PIPELINE_NAME) == evaluation

    first, second = report.list_evaluations(str(cnn_run_with_baseline))
    assert second == evaluation
    assert first.blessed is True and not first.has_baseline
    assert first.pushed_path and (Path(first.pushed_path) / "saved_model.pb").exists()
    assert first.model_uri != second.model_uri   # the second run retrained


def test_missing_output_unknown_pipeline_and_no_evaluation_are_explained(cnn_run_with_baseline, tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m pipeline run"):
        report.find_latest_evaluation(str(tmp_path))
    with pytest.raises(ValueError, match=f"'nope'.*{PIPELINE_NAME}"):
        report.find_latest_evaluation(str(cnn_run_with_baseline), "nope")

    # A pipeline that ran but never got to its Evaluator (e.g. the Trainer failed).
    store = mlmd.open_store(mlmd.sqlite_config(str(tmp_path / "metadata.sqlite")))
    from ml_metadata.proto import metadata_store_pb2 as pb

    context_type = store.put_context_type(pb.ContextType(name="pipeline"))
    [context] = store.put_contexts([pb.Context(type_id=context_type, name="half-pipeline")])
    execution_type = store.put_execution_type(pb.ExecutionType(name="Trainer"))
    [execution] = store.put_executions([pb.Execution(type_id=execution_type,
                                                     last_known_state=pb.Execution.FAILED)])
    store.put_attributions_and_associations([], [pb.Association(context_id=context, execution_id=execution)])
    with pytest.raises(ValueError, match="'half-pipeline'.*no evaluation yet"):
        report.find_latest_evaluation(str(tmp_path))


def test_slice_metrics_are_tfma_values_worst_first(evaluation):
    frame = report.slice_metrics_frame(evaluation)
    expected = _tfma_metrics(evaluation.uri, "candidate")
    assert set(frame["slice"]) == set(expected) and EXPECTED_SLICES <= set(expected)
    for _, row in frame.iterrows():
        assert row[ACCURACY] == expected[row["slice"]][ACCURACY]
        assert row["example_count"] == expected[row["slice"]]["example_count"]
    assert frame.attrs["key_metric"] == ACCURACY
    assert list(frame[ACCURACY]) == sorted(frame[ACCURACY])
    worst = frame[report.worst_slices(frame)]
    sliced = {k: v[ACCURACY] for k, v in expected.items() if k != "overall"}
    assert set(worst["slice"]) == {k for k, v in sliced.items() if v == min(sliced.values())}


def test_candidate_vs_baseline_are_tfma_values(evaluation):
    frame = report.comparison_frame(evaluation).set_index("metric")
    candidate = _tfma_metrics(evaluation.uri, "candidate")["overall"]
    baseline = _tfma_metrics(evaluation.uri, "baseline")["overall"]
    assert frame.loc[ACCURACY, "candidate"] == candidate[ACCURACY]
    assert frame.loc[ACCURACY, "baseline"] == baseline[ACCURACY]
    assert frame.loc[ACCURACY, "diff"] == candidate[f"{ACCURACY}_diff"]
    assert frame.loc["example_count", "candidate"] == frame.loc["example_count", "baseline"]


def test_validation_says_which_threshold_failed(evaluation):
    summary = report.validation_summary(evaluation)
    assert summary["blessed"] is False
    assert any(f.startswith(f"{ACCURACY} (overall) = ") and "the minimum 0.999" in f for f in summary["failures"])
    assert summary["text"].startswith("NOT blessed")
    checks = report.validation_frame(evaluation).set_index("check")
    overall = _tfma_metrics(evaluation.uri, "candidate")["overall"]
    assert checks.loc[f"{ACCURACY} (overall) >= 0.999", "passed"] == False  # noqa: E712 (numpy bool)
    assert checks.loc[f"{ACCURACY} (overall) >= 0.999", "value"] == overall[ACCURACY]
    change = checks.loc[f"{ACCURACY} (overall) at most 0.01 below the baseline"]
    assert change["value"] == overall[f"{ACCURACY}_diff"]
    assert change["passed"] == (overall[f"{ACCURACY}_diff"] >= -0.01)


def test_per_class_metrics_have_class_names(evaluation):
    frame = report.per_class_frame(evaluation)
    assert list(frame["class"]) == [str(d) for d in range(10)]   # the digits' label vocabulary
    for class_id in (0, 9):
        expected = _tfma_metrics(evaluation.uri, "candidate", f"classId:{class_id}")["overall"]
        row = frame[frame["class_id"] == class_id].iloc[0]
        # NaN: no example of the slice got this class with probability >= 0.5.
        assert (row["precision"], row["recall"]) == pytest.approx(
            (expected["precision"], expected["recall"]), rel=0, abs=0, nan_ok=True)


def test_confusion_matrix_agrees_with_the_slices(evaluation):
    matrix = report.confusion_matrix_frame(evaluation)
    metrics = _tfma_metrics(evaluation.uri, "candidate")
    assert matrix.shape == (10, 10)
    assert matrix.values.sum() == metrics["overall"]["example_count"]
    for digit in ("0", "8"):
        assert matrix.loc[digit].sum() == metrics[f"label={digit}"]["example_count"]
        assert matrix.loc[digit, digit] / matrix.loc[digit].sum() == pytest.approx(
            metrics[f"label={digit}"][ACCURACY], abs=1e-6)


def test_misclassified_examples_are_wrong_predictions_of_the_candidate(evaluation):
    examples = report.misclassified_examples(evaluation, sample_size=120)
    assert examples.attrs["sampled"] == 120
    assert len(examples) > 0   # 40 training steps leave mistakes
    assert (examples["actual"] != examples["predicted"]).all()
    assert all(image.shape == (8, 8, 1) for image in examples["image"])
    assert examples["example_id"].str.startswith("digits/").all()


def test_write_report_writes_html_and_json(written_report, evaluation):
    page = open(written_report, encoding="utf-8").read()
    assert 'id="slice-metrics"' in page and page.count('<img src="data:image/png;base64,') == 3
    assert "Could not draw" not in page
    data = json.loads(open(written_report[:-len(".html")] + ".json").read())
    expected = _tfma_metrics(evaluation.uri, "candidate")
    assert data["overall"][ACCURACY] == expected["overall"][ACCURACY]
    assert {name: values[ACCURACY] for name, values in data["slices"].items()} == {
        name: values[ACCURACY] for name, values in expected.items()}
    assert data["blessed"] is False and data["pushed_path"] is None
    assert data["baseline"][ACCURACY] == _tfma_metrics(evaluation.uri, "baseline")["overall"][ACCURACY]
    assert data["evaluation_uri"] == evaluation.uri and data["key_metric"] == ACCURACY


def test_report_shows_the_reference_predictors_and_the_training_regime(written_report, evaluation):
    """The Trainer's references.json and training.json, next to the model's own overall value."""
    import pandas as pd
    from tfx.utils import path_utils

    from models.common import references
    from pipeline.results import gate_summary

    page = open(written_report, encoding="utf-8").read()
    [table] = pd.read_html(io.StringIO(page), attrs={"id": "references"})
    payload = references.read_references(path_utils.serving_model_path(evaluation.model_uri))
    shown = dict(zip(table["model"], table[ACCURACY]))
    assert set(shown) == set(payload["references"]) | {"this model"}
    for name, value in payload["references"].items():
        assert shown[name] == pytest.approx(value, abs=5e-5)  # printed to 4 decimals
    overall = _tfma_metrics(evaluation.uri, "candidate")["overall"][ACCURACY]
    assert shown["this model"] == pytest.approx(overall, abs=5e-5)
    assert list(table[ACCURACY]) == sorted(table[ACCURACY], reverse=True)
    # The gate's rule in one sentence, as the summary and the model card print it (issue 43).
    assert f'<p id="gate-rule">{html.escape(references.gate_rule(payload["margin"]))}</p>' in page
    training = gate_summary.training_line(gate_summary.read_model_extras(evaluation.model_uri)["training"])
    assert training.startswith("Training: kept step ") and html.escape(training) in page


def test_report_renders_in_headless_chromium(written_report, tmp_path):
    try:
        binary = find_chromium()
    except ChromiumNotFound as error:
        pytest.fail(f"This test needs a real browser: {error}")
    with chromium_page(tmp_path / "chromium-profile", binary) as page:
        page.open(f"file://{written_report}")
        seen = page.evaluate(PAGE_CHECK)
        page.screenshot(ARTIFACTS_DIR / "report-chromium.png")
    assert seen["readyState"] == "complete" and seen["title"] == f"Evaluation report: {PIPELINE_NAME}"
    assert EXPECTED_SLICES <= set(seen["sliceRows"]) and seen["tableHeight"] > 100
    assert seen["blessing"] == "NOT blessed"
    assert len(seen["images"]) == 3, seen["images"]
    for image in seen["images"]:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
    outside = [u for u in page.requested_urls() if not u.startswith(("file:", "data:"))]
    assert not outside, f"the report is not self-contained: {outside}"


def test_first_evaluation_without_baseline(cnn_run_with_baseline):
    first = report.list_evaluations(str(cnn_run_with_baseline))[0]
    assert report.comparison_frame(first).empty
    checks = report.validation_frame(first)
    assert list(checks["check"]) == [f"{ACCURACY} (overall) >= 0.3"] and checks["passed"].all()
    assert report.validation_summary(first) == {
        "blessed": True, "failures": [], "text": "Blessed: yes, every threshold passed."}
    page, data = report.render_html(first)
    assert "No baseline" in page and data["baseline"] is None and data["pushed_path"] == first.pushed_path
    card = Path(first.pushed_path) / "model_card.html"  # the report links the pushed version's model card
    assert card.exists() and data["model_card"] == card.as_uri() and f'id="model-card" href="{card.as_uri()}"' in page


def test_family_table_names_the_models_gate_metrics_and_slices():
    """The report's table must follow the model code it describes."""
    from data import text_features
    from models.cnn.evaluation import ACCURACY as CNN_GATE
    from models.seq2seq.evaluation import GATE_METRIC as SEQ2SEQ_GATE

    assert report.get_report_family("cnn").key_metric == CNN_GATE
    assert report.get_report_family("seq2seq").key_metric == SEQ2SEQ_GATE
    assert report.get_report_family("seq2seq").slicing_features == text_features.SLICING_FEATURES


def test_seq2seq_picture_stub_works_off_whatever_slices_exist(evaluation):
    """The text family's picture needs no model code: any evaluation with slices will do."""
    import dataclasses

    as_text_model = dataclasses.replace(evaluation, family="seq2seq")
    pictures = report.family_pictures(as_text_model)
    # No top-5 metric or document slices here: it falls back to accuracy and the first feature.
    [(title, figure)] = pictures.items()
    assert title in {f"{ACCURACY} by label", f"{ACCURACY} by brightness"}
    assert report.figure_png(figure).startswith(b"\x89PNG")


def test_summary_report_and_pusher_read_the_same_metrics(cnn_run_with_baseline):
    """One reader (artifacts/tfma_results.py): the run summary, the report and push_info.json agree with TFMA."""
    from artifacts import tfma_results
    from pipeline.results import summary

    first, second = report.list_evaluations(str(cnn_run_with_baseline))
    expected = _tfma_metrics(first.uri, None)["overall"]
    with open(Path(first.pushed_path) / "push_info.json", encoding="utf-8") as handle:
        pushed = json.load(handle)["metrics"]
    assert pushed[ACCURACY] == expected[ACCURACY] == tfma_results.overall_metrics(first.uri)[ACCURACY]
    frame = report.slice_metrics_frame(second).set_index("slice")
    by_slice = {m.slice_name: m.value for m in summary.slice_metrics(second.uri, ACCURACY)}
    assert by_slice == {name: frame.loc[name, ACCURACY] for name in frame.index}
    assert summary.validation_failures(second.uri) == report.validation_summary(second)["failures"] != []


def test_family_samples_section_follows_the_family_table(evaluation):
    """Sample generations come from the family table (seq2seq has them, cnn not), not a family-name test."""
    import dataclasses

    page, _ = report.render_html(evaluation)
    assert 'id="generations"' not in page
    as_text_model = dataclasses.replace(evaluation, family="seq2seq")
    page, _ = report.render_html(as_text_model)
    # The CNN candidate has no `generate` signature: the section says so instead of failing the report.
    assert 'id="generations"' in page and "Could not generate samples" in page


def test_report_shows_the_classes_and_slices_it_could_not_evaluate(evaluation, tmp_path):
    """The run summary's missing-eval-slice warning is in the HTML and JSON too (read from StatisticsGen's output)."""
    import dataclasses

    import pandas as pd
    import tensorflow_data_validation as tfdv

    from pipeline.report.data_warnings import split_warnings

    assert evaluation.statistics_uri and Path(evaluation.statistics_uri, "Split-eval").is_dir()  # found via MLMD
    assert split_warnings(evaluation) == []   # the digits cover every class and brightness bucket
    frames = {"train": pd.DataFrame({"label": ["0", "1", "1"], "brightness": ["dark", "bright", "dark"]}),
              "eval": pd.DataFrame({"label": ["0"], "brightness": ["dark"]})}
    for split, frame in frames.items():
        (tmp_path / f"Split-{split}").mkdir()
        (tmp_path / f"Split-{split}" / "FeatureStats.pb").write_bytes(
            tfdv.generate_statistics_from_dataframe(frame).SerializeToString())
    page, data = report.render_html(dataclasses.replace(evaluation, statistics_uri=str(tmp_path)))
    assert 'id="data-warnings"' in page
    assert "class(es) [&#x27;1&#x27;] have no example in the eval split" in page
    assert "brightness=bright (1 train) have no example in the eval split" in page
    assert len(data["data_warnings"]) == 2
