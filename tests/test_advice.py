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


def _image_record(best, ran, accuracy, val_accuracy, loss, val_loss, stopped=False):
    """An image model's record as models/common/regime.py writes it (Keras History keys)."""
    return {"regime": "early_stopping", "best_epoch": best, "epochs_run": ran, "stopped_early": stopped,
            "holdout_accuracy": val_accuracy[best - 1],
            "curves": {"accuracy": accuracy, "val_accuracy": val_accuracy, "loss": loss, "val_loss": val_loss}}


def test_image_overfitting_from_its_accuracy_curves():
    record = _image_record(3, 6, accuracy=[0.5, 0.7, 0.8, 0.9, 0.95, 0.99], val_accuracy=[0.45, 0.6, 0.66, 0.65,
                           0.64, 0.63], loss=[1.5, 0.9, 0.6, 0.4, 0.2, 0.1], val_loss=[1.6, 1.1, 1.0, 1.1, 1.3, 1.5],
                           stopped=True)
    words = advice.diagnosis(record)
    assert words.startswith("overfitting (held-out best at epoch 3 of 6, 0.14 below the train score)"), words
    assert "more data" in words


def test_image_held_out_loss_still_falling_at_the_end_asks_for_more_epochs():
    # The held-out accuracy plateaued (best at epoch 2), but its loss was still falling at the last epoch.
    record = _image_record(2, 4, accuracy=[0.6, 0.7, 0.7, 0.7], val_accuracy=[0.6, 0.7, 0.7, 0.7],
                           loss=[1.2, 1.0, 0.9, 0.85], val_loss=[1.3, 1.1, 1.0, 0.96])
    words = advice.diagnosis(record)
    assert words.startswith("underfitting (the held-out loss still fell at the last epoch, 4: 1.000 -> 0.960)"), words
    assert "--epochs" in words


def test_image_held_out_loss_turning_up_is_overfitting_even_when_accuracies_are_flat():
    record = _image_record(2, 4, accuracy=[0.8, 0.8, 0.8, 0.8], val_accuracy=[0.8, 0.8, 0.8, 0.8],
                           loss=[0.6, 0.5, 0.4, 0.3], val_loss=[0.6, 0.55, 0.62, 0.7])
    words = advice.diagnosis(record)
    assert words.startswith(
        "overfitting (the held-out loss was lowest at epoch 2 of 4, 0.550, and rose to 0.700"), words


def test_image_flat_curves_give_no_advice():
    record = _image_record(2, 4, accuracy=[0.8, 0.8, 0.8, 0.8], val_accuracy=[0.8, 0.8, 0.8, 0.8],
                           loss=[0.5, 0.5, 0.5, 0.5], val_loss=[0.5, 0.49, 0.5, 0.5])
    assert advice.diagnosis(record) is None


def test_advice_counts_steps_as_the_training_line_does():
    # The training line says "kept step 1,800 of 3,000 (checked every 300 steps)"; the advice speaks of the
    # same steps, and asks for --train-steps: with the defaults the budget grows with the square root of the
    # data, so --epochs alone may not lengthen training.
    record = {**_image_record(6, 10, accuracy=[0.5 + 0.04 * i for i in range(10)],
                              val_accuracy=[0.45, 0.5, 0.55, 0.6, 0.62, 0.64, 0.63, 0.62, 0.6, 0.59],
                              loss=[1.0 - 0.08 * i for i in range(10)], val_loss=[1.0] * 10, stopped=True),
              "steps_per_epoch": 300}
    words = advice.diagnosis(record)
    assert words.startswith("overfitting (held-out best at step 1800 of 3000, "), words
    rising = {**_record(6, 6, fit=[0.1, 0.15, 0.2, 0.22, 0.24, 0.25], held=[0.1, 0.14, 0.18, 0.2, 0.21, 0.22]),
              "steps_per_epoch": 250}
    words = advice.diagnosis(rising)
    assert words.startswith("underfitting (the held-out score still rose at the last check, step 1500): "
                            "train longer (--train-steps 3000; this run's budget was 1500 steps)"), words
    # A time budget cut the sixth check short at step 1,400: the advice counts the steps that were trained.
    words = advice.diagnosis({**rising, "steps_run": 1400, "stopped_at_time_budget": True, "time_budget_s": 1800})
    assert words.startswith("underfitting (the held-out score still rose at the last check, step 1400): "
                            "train longer (--train-steps 2800; this run's budget was 1400 steps)"), words
    loss_falling = {**_image_record(2, 4, accuracy=[0.6, 0.7, 0.7, 0.7], val_accuracy=[0.6, 0.7, 0.7, 0.7],
                                    loss=[1.2, 1.0, 0.9, 0.85], val_loss=[1.3, 1.1, 1.0, 0.96]), "steps_per_epoch": 100}
    assert advice.diagnosis(loss_falling).startswith(
        "underfitting (the held-out loss still fell at the last check, step 400: 1.000 -> 0.960): train longer")
