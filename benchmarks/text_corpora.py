"""The text family with every default, on corpora nobody here wrote: one whole run each, as a user runs it.

For each corpus (Debian's own prose on this machine: two single documents, a license, the Python policy, the
Vim user manual, package READMEs; from one file of ~5k words to a folder of ~100k; and any folder given with
``--folder``, such as ``debian_text_folder.py``'s 250,000 or 1,000,000 words), in a fresh process::

    python -m pipeline run --model seq2seq --data CORPUS --output WORK/run-NAME

with nothing but the data given. Read back from the run's own artifacts (not from its terminal):

- the served model's eval top-5, the Evaluator's, with the 95 % Wilson interval the summary prints;
- the best count model, chosen by cross-fitting on train (the gate's Kneser-Ney reference): its eval top-5 and
  what it is (order, counting, cache and unknown-word shares);
- the served model over that count model on up to 20,000 of the same eval windows, paired, with its 95 %
  interval (the Trainer's ``_disagreements``, which the gate also uses);
- the served mix: the network's share, and the network's and the counts' own top-5 on the held-out train
  windows the mix was fitted on;
- blessed, and pushed;
- the wall time of the whole run and its peak memory summed over all its processes (sampled every 0.5 s).

A run that fails is reported with its exit code and its last lines, and the next corpus runs. Corpora are
copied once into ``WORK/corpora`` and reused, so that a second stack (another Python, another root) given the
same work folder reads the very same files. ``--read RUN`` prints one finished run's row, runs nothing.

    python benchmarks/text_corpora.py                                      # the seven corpora (~20 min here)
    python benchmarks/text_corpora.py --only gpl3 triggers
    python benchmarks/text_corpora.py --only --folder 250k=/tmp/text250k/docs --folder 1m=/tmp/text1m/docs
    python benchmarks/text_corpora.py --read /tmp/run                      # one finished run, no run

Results: docs/benchmarks.md and docs/history/benchmarks-log.md ("Text corpora with every default").
"""
from __future__ import annotations

import glob
import gzip
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402  (puts the project on the path)

NAME = "text_corpora"
PIPELINE = "seq2seq-pipeline"
MIN_WORDS = 50  # files shorter than this are left out of a corpus folder: stubs, shorter than one window
#: name -> (kind, glob of source files). Gzipped files are decompressed into the corpus folder.
CORPORA = {
    "gpl3": ("license, one file", "/usr/share/common-licenses/GPL-3"),
    "triggers": ("specification, one file", "/usr/share/doc/dpkg/spec/triggers.txt"),
    "gpl2": ("license, one file", "/usr/share/common-licenses/GPL-2"),
    "python-policy": ("technical policy, one file", "/usr/share/doc/python3/python-policy.txt.gz"),
    "vim-usr-01-05": ("user manual, 5 chapters", "/usr/share/vim/vim9*/doc/usr_0[1-5].txt"),
    "doc-readmes": ("package READMEs, many short files", "/usr/share/doc/*/README*"),
    "vim-usr-all": ("user manual, all chapters", "/usr/share/vim/vim9*/doc/usr_*.txt"),
}
_CORPUS_LINE = re.compile(r"^Corpus: ([\d,]+) documents? read \(([^)]*) words\)", re.MULTILINE)


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--only", nargs="*", default=None,
                   help=f"corpora to run, of {', '.join(CORPORA)} (default: all; --only alone: none)")
    p.add_argument("--folder", action="append", default=[], metavar="NAME=PATH",
                   help="a folder (or file) of your own to run too; repeat for more")
    p.add_argument("--read", default=None, metavar="RUN", help="print a finished run's row and run nothing")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--work-dir", default="/tmp/text-corpora")
    return p.parse_args(argv)


def build_corpus(name: str, pattern: str, root: Path) -> Path | None:
    """A folder of .txt copies of ``pattern``'s files (None when none exists on this machine), built once."""
    target = root / "corpora" / name
    if (target / ".complete").exists():
        return target
    files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))
    if not files:
        return None
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for path in files:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        if len(text.split()) < MIN_WORDS:
            continue
        stem = path.strip("/").replace("/", "_").removesuffix(".gz")
        (target / f"{stem}.txt").write_text(text, encoding="utf-8")
    (target / ".complete").touch()
    return target


def read_run(output: Path) -> dict[str, Any]:
    """One finished run's figures, from its Evaluator's and Trainer's artifacts and its serving folder, read as
    the run summary reads them (``reference_gate.read_gate``, ``gate_summary.read_model_extras``)."""
    from artifacts.tfma_results import slice_metrics
    from components.reference_gate import read_gate
    from models.common import intervals
    from pipeline.families import get_family
    from pipeline.results.gate_summary import read_model_extras

    tfx = output / "tfx" / PIPELINE
    hint = f"{output} is not a finished text run"
    evaluation = C.latest_numbered(f"{tfx}/Evaluator/evaluation/*", hint)
    gate = read_gate(evaluation)
    if gate is None:
        raise SystemExit(f"no gate.json in {evaluation}: {hint} of this version")
    metric = get_family("seq2seq").gate_metric
    overall = next(m for m in slice_metrics(evaluation, metric) if m.slice_name == "overall")
    extras = read_model_extras(C.latest_numbered(f"{tfx}/Trainer/model/*", hint))
    training, references = extras.get("training", {}), extras.get("references", {})
    counts = gate["gate_reference"]
    paired = gate.get("paired", {}).get(counts, {})
    blend = training.get("blend") or {}
    components = blend.get("components", {})
    blessing = C.latest_numbered(f"{tfx}/Evaluator/blessing/*", hint)
    return {
        "served": overall.value, "eval_windows": int(overall.count),
        "interval": list(intervals.wilson(overall.value, int(overall.count))),
        "counts_name": counts, "counts": gate["references"][counts],
        "counts_description": references.get("descriptions", {}).get(counts, ""),
        "contained": counts in gate.get("contained", []),
        "gain": paired.get("gain"), "gain_interval": [paired.get("gain_low"), paired.get("gain_high")],
        "paired_windows": paired.get("scored"),
        "mix": blend.get("weights", {}), "network_held_out": components.get("network", {}).get("top5"),
        "counts_held_out": components.get("counts", {}).get("top5"), "held_out_windows": blend.get("held_out_windows"),
        "steps": training.get("steps"),
        "threshold": gate.get("threshold"), "blessed": os.path.exists(os.path.join(blessing, "BLESSED")),
        "pushed": sorted(glob.glob(str(output / "serving" / "seq2seq" / "[0-9]*"))),
    }


def run_corpus(name: str, kind: str, data: Path, work: Path, args) -> dict[str, Any]:
    output = work / f"run-{name}"
    shutil.rmtree(output, ignore_errors=True)
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", "seq2seq", "--data", str(data), "--output", str(output)]
    C.log(f"{name}: {C.shell_command(cmd)}")
    with C.PeakChildrenRss(interval=0.5) as memory:
        out = C.run_timed(cmd, timeout=args.timeout, log_path=work / f"run-{name}.log")
    row = {"corpus": name, "kind": kind, "data": str(data), "returncode": out["returncode"],
           "wall_s": round(out["wall_s"], 1), "peak_rss_gib": round(memory.peak_gib, 2)}
    corpus = _CORPUS_LINE.search(out["stdout"])
    if corpus:
        row["documents"], row["words"] = int(corpus.group(1).replace(",", "")), corpus.group(2)
    if out["returncode"] == 0:
        row.update(read_run(output))
    else:
        row["tail"] = (out["stdout"] + out["stderr"]).strip().splitlines()[-12:]
    C.log(f"{name}: " + describe(row))
    return row


def _served(row: dict[str, Any]) -> str:
    low, high = row["interval"]
    return f"{row['served']:.4f} [{low:.4f}, {high:.4f}]"


def _gain(row: dict[str, Any]) -> str:
    """The paired gain over the count model with its interval ("" when the served model is the count model)."""
    if row["gain"] is None:
        return ""
    low, high = row["gain_interval"]
    return f"{row['gain']:+.4f} [{low:+.4f}, {high:+.4f}]"


def describe(row: dict[str, Any]) -> str:
    """One line a reader compares across corpora."""
    if row.get("returncode", 0) != 0:
        return f"exit {row['returncode']}: " + " / ".join(row.get("tail", [])[-3:])
    line = f"served {_served(row)} on {row['eval_windows']:,} eval windows; {row['counts_name']} {row['counts']:.4f}"
    if row["gain"] is not None:
        line += f"; paired gain {_gain(row)} on {row['paired_windows']:,}"
    line += f"; network share {row['mix'].get('network', 0.0):.2f}"
    line += f"; {'blessed' if row['blessed'] else 'NOT blessed'}, {'pushed' if row['pushed'] else 'not pushed'}"
    return line


def _number(value: float | None, fmt: str = "{:.4f}") -> str:
    return "" if value is None else fmt.format(value)


def print_rows(rows: list[dict[str, Any]]) -> None:
    table = []
    for r in rows:
        if r["returncode"] != 0:
            table.append((r["corpus"], r.get("words", ""), f"exit {r['returncode']}", "", "", "", "", "",
                          r["wall_s"], r["peak_rss_gib"]))
            continue
        table.append((r["corpus"], r.get("words", ""), f"{_served(r)} n={r['eval_windows']:,}", f"{r['counts']:.4f}",
                      _gain(r),
                      f"{r['mix'].get('network', 0.0):.2f}",
                      f"{_number(r['network_held_out'])} / {_number(r['counts_held_out'])}",
                      ("pushed" if r["pushed"] else "blessed, not pushed") if r["blessed"] else "NOT blessed",
                      r["wall_s"], r["peak_rss_gib"]))
    C.print_table(["corpus", "words", "served top-5 [95% CI]", "best count model", "served - counts [95% CI, paired]",
                   "network share", "held out: network / counts", "gate", "wall s", "peak GiB"], table,
                  title="The text family with every default, one whole run per corpus")
    for r in rows:
        if r["returncode"] == 0:
            print(f"{r['corpus']}: {r['counts_name']} is {r['counts_description']}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.read:
        row = {"corpus": os.path.basename(args.read.rstrip("/")), "returncode": 0, **read_run(Path(args.read))}
        print(describe(row))
        C.write_json(NAME, {"rows": [row]}, args, C.machine_info())
        return 0
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    contention = C.Contention()
    plan = []
    for name, (kind, pattern) in CORPORA.items():
        if args.only is not None and name not in args.only:
            continue
        folder = build_corpus(name, pattern, work)
        if folder is None:
            print(f"{name}: no {pattern} on this machine, skipped")
            continue
        plan.append((name, kind, folder))
    for given in args.folder:
        name, _, path = given.partition("=")
        if not path:
            raise SystemExit(f"--folder {given!r}: write NAME=PATH, e.g. 1m=/tmp/text1m/docs")
        plan.append((name, "your folder", Path(path)))
    rows = [run_corpus(name, kind, folder, work, args) for name, kind, folder in plan]
    print_rows(rows)
    C.write_json(NAME, {"rows": rows}, args, machine, contention)
    return 0 if all(r["returncode"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
