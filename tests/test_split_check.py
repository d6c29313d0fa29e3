"""Split checks on real StatisticsGen output (TFDV statistics protos), without running a pipeline."""
import os

import pytest
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.split_check import SplitError, SplitFacts, check_splits, read_split_facts


def _write_stats(uri, split, labels):
    import pandas as pd

    frame = pd.DataFrame({"label": labels, "x": list(range(len(labels)))})
    stats = tfdv.generate_statistics_from_dataframe(frame) if labels else statistics_pb2.DatasetFeatureStatisticsList(
        datasets=[statistics_pb2.DatasetFeatureStatistics(num_examples=0)])
    os.makedirs(os.path.join(uri, f"Split-{split}"))
    with open(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"), "wb") as handle:  # as StatisticsGen writes
        handle.write(stats.SerializeToString())


def test_reads_counts_and_classes_from_statistics(tmp_path):
    _write_stats(str(tmp_path), "train", ["a", "a", "b"])
    _write_stats(str(tmp_path), "eval", [])
    facts = read_split_facts(str(tmp_path), ["train", "eval"])
    assert facts["train"] == SplitFacts(3, {"a": 2, "b": 1})
    assert facts["eval"].examples == 0
    with pytest.raises(SplitError) as raised:
        check_splits(facts)
    assert "eval split is empty" in raised.value.paragraph and "train 3" in raised.value.paragraph


def test_class_missing_from_train_is_an_error():
    with pytest.raises(SplitError, match=r"\['b'\] have no example in the train split"):
        check_splits({"train": SplitFacts(2, {"a": 2}), "eval": SplitFacts(1, {"b": 1})})


def test_class_missing_from_eval_is_a_warning():
    warnings = check_splits({"train": SplitFacts(3, {"a": 2, "b": 1}), "eval": SplitFacts(2, {"a": 2})})
    assert warnings == ["class(es) ['b'] have no example in the eval split: they are not evaluated"]


def test_summary_prints_the_split_warnings(tmp_path):
    from pipeline.config import PipelineConfig
    from pipeline.results import summary

    result = summary.RunSummary(pipeline_name="p", components=[], split_counts={"train": 3, "eval": 2},
                                num_input_examples=5, metric_name="accuracy",
                                warnings=["class(es) ['b'] have no example in the eval split: they are not evaluated"])
    text = summary.format_summary(result, PipelineConfig(output_dir=str(tmp_path)), 1.0)
    assert "WARNING: class(es) ['b'] have no example in the eval split" in text


def test_summary_reads_the_warnings_from_statistics(tmp_path):
    from pipeline.results.summary import _split_warnings

    _write_stats(str(tmp_path), "train", ["a", "a", "b"])
    _write_stats(str(tmp_path), "eval", ["a"])
    assert _split_warnings(str(tmp_path), ["train", "eval"]) == [
        "class(es) ['b'] have no example in the eval split: they are not evaluated"]


def _write_frame_stats(uri, split, frame):
    os.makedirs(os.path.join(uri, f"Split-{split}"))
    with open(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"), "wb") as handle:
        handle.write(tfdv.generate_statistics_from_dataframe(frame).SerializeToString())


def test_slice_missing_from_eval_is_named_in_a_warning(tmp_path):
    """A brightness bucket train has and eval lacks is never evaluated: the warning names the slice."""
    import pandas as pd

    _write_frame_stats(str(tmp_path), "train", pd.DataFrame({
        "label": ["a", "b", "a", "b"], "brightness": ["dark", "bright", "medium", "bright"]}))
    _write_frame_stats(str(tmp_path), "eval", pd.DataFrame({"label": ["a", "b"], "brightness": ["dark", "medium"]}))
    facts = read_split_facts(str(tmp_path), ["train", "eval"], ("label", "brightness"))
    assert facts["train"].slices == {"brightness": {"bright": 2, "dark": 1, "medium": 1}}
    assert check_splits(facts) == [
        "slice(s) brightness=bright (2 train) have no example in the eval split: they are not evaluated "
        "(the slice table lacks them)"]
    # Only the features the family slices by are checked.
    assert check_splits(read_split_facts(str(tmp_path), ["train", "eval"])) == []


def test_documents_held_out_whole_are_not_missing_slices_but_blocks_are():
    """Whole-document split: no document in both splits, by design. Block split: a document without eval windows."""
    whole = {"train": SplitFacts(4, {}, {"document": {"a": 2, "b": 2}, "position": {"start": 4}}),
             "eval": SplitFacts(2, {}, {"document": {"c": 2}, "position": {"start": 2}})}
    assert check_splits(whole, split_feature="document") == []
    blocks = {"train": SplitFacts(4, {}, {"document": {"a": 2, "b": 2}}),
              "eval": SplitFacts(1, {}, {"document": {"a": 1}})}
    [warning] = check_splits(blocks, split_feature="document")
    assert warning.startswith("slice(s) document=b (2 train) have no example in the eval split")


def test_summary_warns_about_slices_the_family_declares(tmp_path):
    import pandas as pd

    from pipeline.families import get_family
    from pipeline.results.summary import _split_warnings

    cnn = get_family("cnn")
    _write_frame_stats(str(tmp_path), "train", pd.DataFrame({"label": ["a", "b"], "brightness": ["dark", "bright"]}))
    _write_frame_stats(str(tmp_path), "eval", pd.DataFrame({"label": ["a", "b"], "brightness": ["dark", "dark"]}))
    [warning] = _split_warnings(str(tmp_path), ["train", "eval"], cnn.slicing_features, cnn.split_feature)
    assert "brightness=bright (1 train) have no example in the eval split" in warning
