"""The Evaluator reads its examples in batches of at most --eval-batch records (issue 45): the batch's
model outputs, not the eval split, set the Evaluator's memory (docs/history/benchmarks-log.md, "The Evaluator's
memory")."""
import contextlib

from components import evaluator


def _do(monkeypatch, properties: dict) -> dict:
    seen: dict = {}

    @contextlib.contextmanager
    def batching(max_records=None):
        seen["records"] = max_records
        yield

    monkeypatch.setattr(evaluator.compat, "byte_size_batching", batching)
    monkeypatch.setattr(evaluator.Executor, "_evaluate", lambda self, inputs, outputs, props: seen.update(props=props))
    evaluator.Executor().Do({}, {}, properties)
    return seen


def test_the_evaluator_batches_at_most_eval_batch_records(monkeypatch):
    # TFX's executor gets the other properties only: it rejects none, but the setting is ours.
    assert _do(monkeypatch, {evaluator.EVAL_BATCH_KEY: 64, "eval_config": "{}"}) == {
        "records": 64, "props": {"eval_config": "{}"}}


def test_a_graph_compiled_before_the_setting_gets_the_default(monkeypatch):
    assert _do(monkeypatch, {"eval_config": "{}"})["records"] == evaluator.EVAL_BATCH_RECORDS
