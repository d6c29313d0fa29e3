"""TFMA EvalConfig for the CNN: what 'good enough to serve' means for a classifier."""
import json
from collections.abc import Sequence

from stackenv.tfma import tfma

from models.cnn import features, metrics
from models.common.evaluation import overall_gate

#: The metrics' names, as their classes in models/cnn/metrics.py report them (one place for each).
ACCURACY = metrics.ArgmaxAccuracy.NAME
#: Metrics that survive imbalance: macro averages over the classes.
BALANCED_ACCURACY = metrics.MeanClassRecall.NAME   # macro recall
MACRO_F1 = metrics.MacroF1.NAME


def eval_config(num_classes: int, min_accuracy: float, max_regression: float) -> tfma.EvalConfig:
    """Accuracy, balanced accuracy and macro F1, per-class precision/recall, example count and
    a confusion matrix: one pass over the examples per slice (``models/cnn/metrics.py``).

    Sliced overall, by class and by brightness. Blessing needs overall accuracy
    >= ``min_accuracy`` and at most ``max_regression`` (absolute) below the baseline.
    """
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(
            signature_name="serving_default",
            preprocessing_function_names=["transform_features"],
            label_key=features.LABEL_XF,
            prediction_key="probabilities",
        )],
        slicing_specs=_slices([features.LABEL, features.BRIGHTNESS]),
        metrics_specs=[
            tfma.MetricsSpec(metrics=[
                tfma.MetricConfig(class_name="ExampleCount"),
                tfma.MetricConfig(class_name="ArgmaxAccuracy", module=metrics.__name__,
                                  per_slice_thresholds=overall_gate(min_accuracy, max_regression)),
                metrics.plot_config(),
                *[tfma.MetricConfig(class_name=class_name, module=metrics.__name__,
                                    config=json.dumps({"num_classes": num_classes}))
                  for class_name in ("MeanClassRecall", "MacroF1", "PerClassPrecisionRecall")],
            ]),
        ],
    )


def _slices(feature_keys: Sequence[str]):
    return [tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=[k]) for k in feature_keys]
