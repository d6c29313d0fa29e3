"""Trainer input through tf.data service (models/common/data_service.py), for real servers.

``auto`` starts a dispatcher and a worker in this process; the batches come back over the
service's gRPC transport, every example once per epoch, features still matching labels.
A model trains on them. An unreachable dispatcher is a ConfigError naming --data-service,
in bounded time.
"""
import time

import numpy as np
import pytest
import tensorflow as tf
from test_inputs import BATCH, SPEC, N, ids_of, pattern  # noqa: F401  (the fixture)

from models.common.inputs import make_dataset


def test_data_service_auto_serves_every_example_once_per_epoch(pattern):  # noqa: F811
    served = make_dataset(pattern, SPEC, "id", BATCH, shuffle=False, repeat=False, data_service="auto")
    ids = np.concatenate(ids_of(served))
    assert sorted(ids.tolist()) == list(range(N))
    # Shuffled and repeated: two epochs of the stream are two permutations of the examples.
    stream = np.concatenate(ids_of(make_dataset(pattern, SPEC, "id", BATCH, data_service="auto"),
                                   batches=2 * N // BATCH))
    assert sorted(stream[:N].tolist()) == list(range(N))


def test_data_service_input_trains_a_model(pattern):  # noqa: F811
    train = make_dataset(pattern, SPEC, "id", BATCH, data_service="auto").map(
        lambda features, label: (features["x"][:, :1] / N, tf.cast(label > N // 2, tf.float32)))
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(tf.keras.optimizers.Adam(0.1), "binary_crossentropy", metrics=["accuracy"])
    history = model.fit(train, epochs=3, steps_per_epoch=40, verbose=0)
    assert history.history["accuracy"][-1] > 0.8, history.history


def test_data_service_unreachable_dispatcher_is_a_config_error():
    from stackenv.errors import ConfigError

    from models.common import data_service

    with socket_port() as port:
        started = time.monotonic()
        with pytest.raises(ConfigError) as raised:
            make_dataset("/nonexistent/*.gz", SPEC, "id", BATCH, data_service=f"localhost:{port}")
    assert time.monotonic() - started < data_service.CONNECT_TIMEOUT_S + 20
    assert raised.value.flag == "--data-service" and "did not answer" in str(raised.value)
    with pytest.raises(ConfigError, match="HOST:PORT"):
        data_service.target("nowhere")


class socket_port:
    """A port that nothing listens on (bound, not listening, while in use)."""

    def __enter__(self):
        import socket

        self._socket = socket.socket()
        self._socket.bind(("localhost", 0))
        return self._socket.getsockname()[1]

    def __exit__(self, *exc):
        self._socket.close()


def test_data_service_cli_unreachable_dispatcher_stops_before_tfx(tmp_path):
    from conftest import run_cli

    with socket_port() as port:
        result = run_cli("run", "--output", tmp_path / "out", "--data-service", f"localhost:{port}", timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "--data-service" in result.stderr and f"localhost:{port}" in result.stderr
    assert not (tmp_path / "out" / "tfx").exists()
