"""Peak memory of one training step against batch size: the factors of ``pipeline/local/memory.py``.

Each measurement is a fresh process that builds the family's model with the project's own builder
(``models.cnn.model.build_cnn``, ``models.seq2seq.model.build_seq2seq``), runs ``train_on_batch`` on
a synthetic batch twice and reports its peak RSS (``ru_maxrss``). The difference between two batch
sizes is what a batch costs; divided by the formula's bytes per example (``memory.py``'s
``bytes_per_example`` of ``pipeline/families/cnn.py`` / ``seq2seq.py`` with factor 1) it gives the
factor those modules multiply by (``MEMORY_FACTOR``: the largest measured, rounded up). A worker's
imports (TensorFlow, TFX, Beam's SDK worker) give ``pipeline/local/memory.py``'s ``WORKER_BYTES``.

    .venv/bin/python benchmarks/memory_factors.py          # a few minutes on 2 cores (5 processes)
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_STEP = r"""
import json, resource, sys
import stackenv  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import numpy as np
family, batch, a, b, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if family == "cnn":
    from models.cnn.model import build_cnn
    from models.cnn import features
    model = build_cnn((a, a, b), num_classes=10)
    x = {features.IMAGE_XF: np.random.rand(batch, a * a * b).astype("float32")}
    y = np.random.randint(0, 10, size=(batch,))
else:
    from models.seq2seq.model import build_seq2seq
    from models.seq2seq import features
    model = build_seq2seq(c, a, b)
    x = {features.CONTEXT_XF: np.random.randint(1, c, size=(batch, a)),
         features.DECODER_INPUT_XF: np.random.randint(1, c, size=(batch, b))}
    y = np.random.randint(1, c, size=(batch, b))
for _ in range(2):
    model.train_on_batch(x, y)
print(json.dumps({"peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


_IMPORTS = r"""
import resource
import stackenv  # noqa: F401
import apache_beam.runners.worker.sdk_worker_main  # noqa: F401
import tensorflow  # noqa: F401
import tfx.v1  # noqa: F401
import tensorflow_transform  # noqa: F401
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak(family: str, batch: int, a: int, b: int, c: int = 0) -> int:
    out = subprocess.run([sys.executable, "-c", _STEP, family, str(batch), str(a), str(b), str(c)], cwd=ROOT,
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from pipeline.families import cnn, seq2seq

    rows = []
    for image, channels, small, large in ((32, 3, 64, 1024),):
        delta = peak("cnn", large, image, channels) - peak("cnn", small, image, channels)
        unit = cnn.bytes_per_example(image, channels, factor=1)
        rows.append(("cnn", f"{image}x{image}x{channels}", small, large, delta / (large - small) / unit))
    for context, target, vocab, small, large in ((32, 8, 4000, 64, 1024),):
        delta = peak("seq2seq", large, context, target, vocab) - peak("seq2seq", small, context, target, vocab)
        unit = seq2seq.bytes_per_example(context, target, vocab, factor=1)
        rows.append(("seq2seq", f"{context}+{target} tokens, vocab {vocab}", small, large,
                     delta / (large - small) / unit))
    for family, shape, small, large, factor in rows:
        print(f"{family:8} {shape:32} batch {small}->{large}: factor {factor:.2f}")
    imports = subprocess.run([sys.executable, "-c", _IMPORTS], cwd=ROOT, capture_output=True, text=True, check=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": ""})
    print(f"Beam SDK worker imports: {int(imports.stdout.split()[-1]) / 2**20:.0f} MiB peak RSS")


if __name__ == "__main__":
    main()
