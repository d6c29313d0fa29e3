"""The advice for a model not blessed follows its training record, not a fixed 'train longer'."""
from pipeline.results import advice, gate_summary


def _record(best, ran, fit, held, stopped=False):
    return {"regime": "early_stopping", "best_epoch": best, "epochs_run": ran, "stopped_early": stopped,
            "curves": {"next_token_top5": fit, "val_next_token_top5": held}}


def test_overfitting_asks_for_data_or_regularisation():
    record = _record(2, 4, fit=[0.2, 0.3, 0.45, 0.6], held=[0.18, 0.22, 0.2, 0.19], stopped=True)
    words = advice.diagnosis(record)
    assert words.startswith("overfitting (held-out best at epoch 2 of 4, 0.08 below the train score)")
    assert "more data" in words and "epochs" not in words


def test_still_rising_asks_for_epochs_or_a_bigger_model():
    words = advice.diagnosis(_record(6, 6, fit=[0.1, 0.15, 0.2, 0.22, 0.24, 0.25], held=[0.1, 0.14, 0.18, 0.2, 0.21,
                                                                                         0.22]))
    assert words.startswith("underfitting (the held-out score still rose at the last epoch, 6)")
    assert "--epochs" in words and "more data" not in words


def test_a_wide_gap_alone_is_overfitting_and_no_record_is_no_advice():
    assert advice.diagnosis(_record(3, 4, fit=[0.5, 0.8, 0.9, 0.9], held=[0.3, 0.4, 0.45, 0.45])).startswith(
        "overfitting")
    assert advice.diagnosis(None) is None
    assert advice.diagnosis({"regime": "fixed_steps", "steps": 10}) is None


def test_the_reference_warning_carries_the_diagnosis():
    payload = {"references": {"bigram": 0.39}, "gate_reference": "bigram", "margin": 0.0}
    record = _record(2, 4, fit=[0.2, 0.3, 0.45, 0.6], held=[0.18, 0.29, 0.2, 0.19], stopped=True)
    [_, warning] = gate_summary.references_lines(payload, "Top-5 next-word accuracy", 0.29, training=record)
    assert "does not beat the best reference predictor (bigram 0.3900); overfitting" in warning
    assert "train longer" not in warning
