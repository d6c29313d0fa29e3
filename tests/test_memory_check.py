"""Memory-hungry settings against the memory available (issue 30, pipeline/local/memory.py): refused
before a run starts, one paragraph naming the flag, the estimate, the memory available and a value
that fits."""
import re

from stackenv.errors import ConfigError

import pytest

from pipeline.config import PipelineConfig
from pipeline.families import get_family
from pipeline.local.memory import WORKER_BYTES, available_bytes, check_memory

GIB = 2**30


def _mem_available() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no MemAvailable in /proc/meminfo")


def test_available_memory_is_at_most_what_the_kernel_says():
    available, source = available_bytes()
    assert 0 < available <= _mem_available() + 256 * 2**20, (available, source)


def _refusal(config, available) -> str:
    with pytest.raises(ConfigError) as error:
        check_memory(config, (available, "test figure"))
    message = str(error.value)
    assert "\n" not in message and f"{available / GIB:.1f} GiB available (test figure)" in message
    return message


@pytest.mark.parametrize("model, settings, batch", [
    ("cnn", {"image_size": 512, "channels": 3}, 4096),
    ("seq2seq", {"vocab_size": 200_000}, 8192),
])
def test_a_batch_too_big_for_the_memory_is_refused_with_a_batch_that_fits(model, settings, batch):
    config = PipelineConfig(model=model, family_settings=settings, batch_size=batch, eval_batch=1)
    per_example = get_family(model).memory.batch(config).bytes_per_example
    message = _refusal(config, GIB)
    assert message.startswith(f"--batch-size: {batch} needs at least {batch * per_example / GIB:.1f} GiB")
    fits = int(re.search(r"--batch-size (\d+) or less fits", message).group(1))
    assert fits * per_example <= GIB < (fits + 1) * per_example
    check_memory(PipelineConfig(model=model, family_settings=settings, batch_size=fits, eval_batch=1),
                 (GIB, "test figure"))


def test_an_example_too_big_for_the_memory_names_the_setting_that_shrinks_it():
    config = PipelineConfig(model="cnn", family_settings={"image_size": 4096, "channels": 3}, batch_size=1)
    assert "Even a batch of 1 does not fit: lower --image-size" in _refusal(config, GIB)


def test_beam_workers_are_counted_in_multi_processing_only():
    config = PipelineConfig(model="cnn", batch_size=8, beam_mode="multi_processing", beam_workers=64)
    message = _refusal(config, 4 * GIB)
    fits = int(re.search(r"--beam-workers (\d+) or fewer fits", message).group(1))
    assert message.startswith("--beam-workers: 64 needs at least") and fits * WORKER_BYTES <= 4 * GIB
    check_memory(PipelineConfig(model="cnn", batch_size=8, beam_mode="in_memory", beam_workers=64), (4 * GIB, "x"))


def test_a_cgroup_full_of_page_cache_still_has_room(tmp_path, monkeypatch):
    """cgroup v2 counts the page cache in memory.current; its inactive part is reclaimed before an
    OOM kill (the kubelet's working set = usage - inactive_file), so a container whose cache filled
    the limit is not refused every run. Files as the kernel writes them (Documentation/admin-guide/cgroup-v2.rst)."""
    from stackenv import memory

    limit, anonymous, cache = 24 * GIB, 2 * GIB, 22 * GIB - 4096
    stat = f"anon {anonymous}\nfile {cache}\nactive_file 0\ninactive_file {cache}\n"
    for name, text in {"memory.max": f"{limit}\n", "memory.current": f"{anonymous + cache}\n",
                       "memory.stat": stat}.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(memory, "CGROUP_MAX", str(tmp_path / "memory.max"))
    monkeypatch.setattr(memory, "CGROUP_CURRENT", str(tmp_path / "memory.current"))
    monkeypatch.setattr(memory, "CGROUP_STAT", str(tmp_path / "memory.stat"))
    available, source = memory.available_bytes()
    assert available == min(limit - anonymous, available) and available > GIB, (available, source)


def test_an_eval_batch_too_big_for_the_memory_is_refused_with_one_that_fits(tmp_path):
    """The Evaluator holds --eval-batch examples' model outputs with TFMA's copies (issue 45): a text
    model's probabilities over a large vocabulary are refused before the run, naming --eval-batch."""
    from pipeline.local.memory import EVAL_FACTOR

    config = PipelineConfig(model="seq2seq", family_settings={"vocab_size": 200_000}, batch_size=1,
                            eval_batch=8192, output_dir=str(tmp_path))
    per_example = EVAL_FACTOR * get_family("seq2seq").memory.eval_output_bytes(config)
    message = _refusal(config, GIB)
    assert message.startswith(f"--eval-batch: 8192 needs at least {8192 * per_example / GIB:.1f} GiB")
    fits = int(re.search(r"--eval-batch (\d+) or less fits", message).group(1))
    assert fits * per_example <= GIB < (fits + 1) * per_example
    check_memory(PipelineConfig(model="seq2seq", family_settings={"vocab_size": 200_000}, batch_size=1,
                                eval_batch=fits, output_dir=str(tmp_path)), (GIB, "test figure"))
    # A served model to compare with: TFMA runs both, twice the outputs, so the same batch no longer fits.
    version = tmp_path / "serving" / "seq2seq" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    served = _refusal(PipelineConfig(model="seq2seq", family_settings={"vocab_size": 200_000}, batch_size=1,
                                     eval_batch=fits, output_dir=str(tmp_path)), GIB)
    assert "served model" in served and f"--eval-batch {fits // 2} or less fits" in served


def test_a_family_without_large_outputs_has_no_evaluator_estimate():
    check_memory(PipelineConfig(model="cnn", batch_size=8, eval_batch=8192, beam_mode="in_memory"), (GIB, "x"))


def test_a_cgroup_v1_limit_is_read_from_this_process_s_own_group(tmp_path, monkeypatch):
    """cgroup v1 (older Docker and Kubernetes nodes, and this CI machine): the limit is the process's own
    group's memory.limit_in_bytes, found through /proc/self/cgroup; "no limit" is a huge number, not "max".
    Files as the kernel writes them (Documentation/admin-guide/cgroup-v1/memory.rst)."""
    from stackenv import memory

    group = tmp_path / "memory" / "kubepods" / "pod1"
    group.mkdir(parents=True)
    limit, anonymous, cache = 3 * GIB, GIB, GIB
    (group / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (group / "memory.usage_in_bytes").write_text(f"{anonymous + cache}\n")
    (group / "memory.stat").write_text(f"cache {cache}\ninactive_file 0\ntotal_inactive_file {cache}\n")
    (tmp_path / "cgroup").write_text("12:pids:/kubepods/pod1\n4:memory:/kubepods/pod1\n1:name=systemd:/\n")
    monkeypatch.setattr(memory, "CGROUP_MAX", str(tmp_path / "absent"))
    monkeypatch.setattr(memory, "CGROUP_V1", str(tmp_path / "memory"))
    monkeypatch.setattr(memory, "PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr("psutil.virtual_memory", lambda: type("VM", (), {"available": 20 * GIB})())
    assert memory.available_bytes() == (limit - anonymous, f"the cgroup limit {group}/memory.limit_in_bytes")
    (group / "memory.limit_in_bytes").write_text(f"{2**63 - 4096}\n")  # no limit: the machine's figure
    assert memory.available_bytes() == (20 * GIB, "MemAvailable")


def test_a_corpus_whose_count_model_does_not_fit_is_refused_before_the_trainer_reads_it():
    """The text Trainer's count model grows with the train windows the data's facts count
    (models/seq2seq/memory.py): too many for the memory available gets one paragraph with the figures and
    how many windows fit; a corpus that fits, or facts without counts, pass."""
    from models.seq2seq.memory import check_count_memory, count_bytes

    facts = {"split_counts": {"train": 4_000_000, "eval": 1_000_000}}
    with pytest.raises(ConfigError) as refused:
        check_count_memory(facts, 32, 8, (2 * GIB, "test figure"))
    message = str(refused.value)
    needed = count_bytes(4_000_000, 32, 8)
    assert needed == 4_000_000 * 40 * 8 * 5.0  # int64 ids of 32+8 tokens, COUNT_FACTOR 5
    assert message.startswith(f"--data: the text Trainer's count model needs about {needed / GIB:.1f} GiB for "
                               "this corpus's 4,000,000 train windows of 32+8 tokens"), message
    assert "2.0 GiB available (test figure)" in message and "--context-words" in message
    fits = int(re.search(r"About ([\d,]+) windows fit", message).group(1).replace(",", ""))
    assert count_bytes(fits, 32, 8) <= 2 * GIB < count_bytes(fits + 1, 32, 8)
    check_count_memory({"split_counts": {"train": fits}}, 32, 8, (2 * GIB, "test figure"))
    check_count_memory({}, 32, 8, (1, "test figure"))  # data prepared without facts: nothing to weigh
