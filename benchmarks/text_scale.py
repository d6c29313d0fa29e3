"""The seq2seq Trainer on a large text folder: peak memory, count-model fit time, SavedModel size.

A regression guard for the count component (models/seq2seq/kneser_ney.py): its tables travel inside
the SavedModel and the Trainer fits them several times (the reference, the held-out fit, the
cross-fitted folds). The data preparation and Transform run once here (benchmarks/seq2seq_quality.py's
helpers, cached by the corpus's fingerprint); then ``run_fn`` runs in a fresh process from each given
checkout (``--repo``, e.g. a worktree of an older commit), with a few training steps, and reports:

- the child's peak resident memory (``VmHWM``) and wall time;
- the time spent in the count fits (``kneser_ney.fit_orders``, ``kneser_ney.fit`` or the older
  ``ngram.fit_tables``), and how many;
- the export's size on disk (all of it, and its ``variables/``), and the time and memory of one
  ``tf.saved_model.load`` in a second fresh process.

    .venv/bin/python benchmarks/debian_text_folder.py /tmp/docs-1m --documents 5000 --words 1100000
    .venv/bin/python benchmarks/text_scale.py /tmp/docs-1m --repo . --repo /tmp/worktree-at-older-commit

Results: docs/history/benchmarks-log.md ("The text model against Kneser-Ney", at scale).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CONFIG = {"vocab_size": 4000, "context_tokens": 32, "target_tokens": 8}

# The peak resident memory of this process alone: VmHWM starts anew at exec, while ru_maxrss keeps the
# forking parent's resident size (a parent holding the transformed corpus would hide a smaller peak).
PEAK = r"""
def peak_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
"""

CHILD = PEAK + r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import stackenv  # noqa: F401
from tfx.components.trainer.fn_args_utils import FnArgs
from models.common.training import TrainingSettings
from models.seq2seq import trainer
try:  # every count fit goes through fit_orders where it exists (kneser_ney.fit calls it), else fit
    from models.seq2seq import kneser_ney as module
    name = "fit_orders" if hasattr(module, "fit_orders") else "fit"
except ImportError:  # before Kneser-Ney: the boundary-event trigram tables
    from models.seq2seq import ngram as module
    name = "fit_tables"
fits = []
original = getattr(module, name)
def timed(*args, **kwargs):
    started = time.monotonic()
    try:
        return original(*args, **kwargs)
    finally:
        fits.append(time.monotonic() - started)
setattr(module, name, timed)
data, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
settings = TrainingSettings(batch_size=64, learning_rate=3e-3, epochs=1, seed=42)
fn_args = FnArgs(train_files=[data + "/train/*"], eval_files=[data + "/eval/*"], train_steps=steps, eval_steps=1,
                 transform_output=data + "/transform", transform_graph_path=data + "/transform",
                 serving_model_dir=out + "/serving", model_run_dir=out + "/logs",
                 custom_config=settings.to_custom_config())
started = time.monotonic()
trainer.run_fn(fn_args)
print(json.dumps({"run_fn_seconds": time.monotonic() - started, "fit_seconds": sum(fits), "fits": len(fits),
                  "peak_rss_mib": peak_mib()}))
"""

LOAD = PEAK + r"""
import json, sys, time
import stackenv  # noqa: F401
import tensorflow as tf
before = peak_mib()
started = time.monotonic()
tf.saved_model.load(sys.argv[1])
print(json.dumps({"load_seconds": time.monotonic() - started, "load_peak_rss_mib": peak_mib(),
                  "rss_before_load_mib": before}))
"""


def prepare(source: str, work: Path) -> tuple[Path, dict]:
    from seq2seq_quality import split_raw_records, transform

    from data.text import prepare_text_dataset

    manifest = prepare_text_dataset(source, work / "data", 16, 4, 2)
    key = hashlib.sha256(json.dumps([manifest.fingerprint, CONFIG]).encode()).hexdigest()[:12]
    splits = split_raw_records(manifest)
    data = work / f"transformed-{key}"
    facts = {"words": manifest.extra["num_words"], "documents": manifest.extra["num_documents"],
             "train_windows": len(splits["train"]), "eval_windows": len(splits["eval"])}
    return transform(splits, CONFIG, data), facts


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def measure(repo: Path, data: Path, out: Path, steps: int) -> dict:
    python = str(HERE.parent / ".venv" / "bin" / "python")
    done = subprocess.run([python, "-c", CHILD, str(data), str(out), str(steps)], cwd=repo, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"run_fn failed in {repo}:\n{done.stderr[-4000:]}")
    row = {"repo": str(repo), "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                                                       capture_output=True, text=True).stdout.strip(),
           **last_json(done.stdout)}
    serving = out / "serving"
    row.update(export_mib=size_mib(serving), variables_mib=size_mib(serving / "variables"))
    loaded = subprocess.run([python, "-c", LOAD, str(serving)], cwd=repo, capture_output=True, text=True)
    row.update(last_json(loaded.stdout) if not loaded.returncode else {"load_error": loaded.stderr[-2000:]})
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", help="a folder of documents or one file")
    p.add_argument("--repo", action="append", default=[], help="a checkout to run run_fn from (repeatable)")
    p.add_argument("--work-dir", default="/tmp/text-scale")
    p.add_argument("--steps", type=int, default=20, help="training steps (the count fits are what is measured)")
    args = p.parse_args(argv)
    work = Path(args.work_dir)
    data, facts = prepare(args.source, work)
    print(json.dumps(facts), flush=True)
    for index, repo in enumerate(args.repo or [str(HERE.parent)]):
        row = measure(Path(repo).resolve(), data, work / f"run-{index}", args.steps)
        print(json.dumps({**facts, **row}), flush=True)


if __name__ == "__main__":
    main()
