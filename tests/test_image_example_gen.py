"""The image ExampleGen (real Beam, real TFX executor) writes what the prepare step wrote.

For each source kind: the same examples, byte for byte (pixels, label ids from the class
list, brightness slices from the same sample rule), in the same train/eval splits as
ImportExampleGen over the prepared TFRecords; and in one pass (each file decoded once,
examples made as the files are decoded).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.example_gen_helpers import recorded_facts, run_example_gen, run_import_example_gen
from tensorflow.train import Example

from components.image_example_gen import ImageExampleGenExecutor
from components.ingest_config import settings_config, source_root
from data.errors import DataError
from data.images import prepare_image_dataset
from data.tfrecords import write_examples


def _image_folder(root: Path) -> Path:
    rng = np.random.default_rng(1)
    for cls, count in (("cat", 7), ("dog", 6)):
        for i in range(count):
            (root / cls).mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, size=(12 + i, 10, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{i}.png")
    (root / "dog" / "sub").mkdir()
    Image.new("L", (5, 9), 200).save(root / "dog" / "sub" / "deep.jpg")
    (root / "dog" / "notes.txt").write_text("not an image")
    return root


def _cifar_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"plane", b"car", b"bird"]}, f, protocol=2)
    rng = np.random.default_rng(2)
    for name, n in (("data_batch_1", 12), ("data_batch_2", 9), ("test_batch", 5)):
        batch = {b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                 b"labels": [i % 3 for i in range(n)]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return folder


@pytest.fixture(params=[4096, 5], ids=["whole-source-sample", "5-image-sample"])
def sample_size(request, monkeypatch: pytest.MonkeyPatch) -> int:
    """The real sample (these sources are smaller: exact tertiles), and one smaller than every
    source, so the prepare step and the ExampleGen must draw the same sample."""
    from data.images import brightness

    monkeypatch.setattr(brightness, "SAMPLE_SIZE", request.param)
    return request.param


def _same_as_prepare(source: str, tmp_path: Path, **shape) -> dict[str, list[bytes]]:
    manifest = prepare_image_dataset(source, tmp_path / "cache", **shape)
    old = run_import_example_gen(manifest.examples_dir, manifest.file_pattern, tmp_path / "old")
    new = run_example_gen(ImageExampleGenExecutor, source, tmp_path / "new",
                          custom_config=settings_config(**shape))
    assert set(new) == {"train", "eval"}
    for split in ("train", "eval"):
        assert len(new[split]) == len(old[split]) > 0, split
        # Parsed, not bytes: a map's serialization order is not fixed.
        assert _by_id(new[split]) == _by_id(old[split]), f"{split}: examples differ from the prepared ones"
    # The whole-data facts the manifest held now come from the ExampleGen's Beam pipeline.
    facts = recorded_facts(tmp_path / "new")
    assert facts["classes"] == manifest.classes and facts["image_shape"] == manifest.image_shape
    assert facts["num_examples"] == manifest.num_examples == sum(facts["split_counts"].values())
    return new


def _by_id(records: list[bytes]) -> dict[str, Example]:
    parsed = [Example.FromString(r) for r in records]
    return {e.features.feature["example_id"].bytes_list.value[0].decode(): e for e in parsed}


def test_folder_matches_prepare(tmp_path: Path, sample_size: int) -> None:
    _same_as_prepare(str(_image_folder(tmp_path / "images")), tmp_path, image_size=8, channels=3)


def test_cifar_matches_prepare(tmp_path: Path, sample_size: int) -> None:
    _same_as_prepare(str(_cifar_folder(tmp_path / "cifar-10-batches-py")), tmp_path, image_size=None,
                     channels=1)


def test_tfrecords_match_prepare(tmp_path: Path, sample_size: int) -> None:
    # Examples in the feature spec, re-read from TFRecords: the class list and shape come from the data.
    # (The bundled digits go through the same executor in tests/test_e2e_cnn.py.)
    folder = _same_as_prepare(str(_image_folder(tmp_path / "images")), tmp_path / "folder", image_size=6,
                              channels=1)
    records = tmp_path / "records"
    write_examples((Example.FromString(r) for r in folder["train"] + folder["eval"]), records, 2)
    _same_as_prepare(str(records), tmp_path / "tfrecords")


def test_source_root_follows_the_resolved_pattern() -> None:
    assert source_root("gs://b/pets", "*") == "gs://b/pets"
    assert source_root("gs://b/pets", "span-3/*") == "gs://b/pets/span-3"
    assert source_root("/data", "train.tfrecord.gz") == "/data/train.tfrecord.gz"


def test_bad_image_is_the_prepare_paragraph(tmp_path: Path) -> None:
    root = _image_folder(tmp_path / "images")
    (root / "cat" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(Exception) as caught:
        run_example_gen(ImageExampleGenExecutor, str(root), tmp_path / "out")
    from stackenv.errors import find_in_chain

    error = find_in_chain(caught.value, DataError)
    assert error is not None, caught.value
    assert "broken.png" in str(error) and "cannot be read" in str(error)


def test_a_folder_is_written_with_its_classes_mixed(tmp_path: Path) -> None:
    # Files are listed class by class and nothing before the write reorders them
    # (components/streaming_write.py); the trainer's shuffle buffer is bounded, so the
    # files must come out mixed, and the same way on every run (a cache hit stays valid).
    import tensorflow as tf

    root = tmp_path / "images"
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(300):
            Image.new("L", (4, 4), i % 256).save(root / cls / f"{i:03d}.png")

    def train_labels_in_file_order(out: Path) -> list[str]:
        run_example_gen(ImageExampleGenExecutor, str(root), out, custom_config=settings_config(image_size=4,
                                                                                               channels=1))
        files = sorted(tf.io.gfile.glob(str(out / "Split-train" / "*")))
        return [Example.FromString(r.numpy()).features.feature["label"].bytes_list.value[0].decode()
                for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]

    labels = train_labels_in_file_order(tmp_path / "first")
    head = labels[:100]
    assert min(head.count("a"), head.count("b")) >= 30, f"the first 100 written: {head}"
    assert train_labels_in_file_order(tmp_path / "second") == labels


def _run_recording_the_beam_graph(tmp_path: Path, out: Path):
    """Run the image executor on a small folder: (its Beam pipeline, the examples written)."""
    pipelines = []

    class Recording(ImageExampleGenExecutor):
        def _make_beam_pipeline(self):
            pipelines.append(super()._make_beam_pipeline())
            return pipelines[-1]

    written = run_example_gen(Recording, str(_image_folder(tmp_path / "images")), out,
                              custom_config=settings_config(image_size=8, channels=3))
    return pipelines[0], written


def test_nothing_reshuffles_the_examples_before_the_write(tmp_path: Path) -> None:
    # TFX's WriteSplit reshuffles before writing, and the DirectRunner holds a shuffle's
    # whole input: every example in memory (benchmarks/README.md, "1,000,000 files").
    import apache_beam as beam

    pipeline, _ = _run_recording_the_beam_graph(tmp_path, tmp_path / "out")

    class Labels(beam.pipeline.PipelineVisitor):
        def __init__(self):
            self.labels = []

        def visit_transform(self, node):
            self.labels.append(node.full_label)

    labels = Labels()
    pipeline.visit(labels)
    writes = [label for label in labels.labels if label.startswith("WriteSplit[")]
    assert any(label.endswith("/Write[0]/WriteImpl/WriteBundles") for label in writes), writes
    assert not [label for label in writes if "Shuffle" in label], writes


def test_each_split_is_two_files_that_hold_every_example_once(tmp_path: Path) -> None:
    # Beam's in_memory runner reads a split on two threads only file by file (pipeline/config.py,
    # THREADED_IN_MEMORY): one file a split would leave StatisticsGen's second thread idle.
    import tensorflow as tf

    _, written = _run_recording_the_beam_graph(tmp_path, tmp_path / "out")
    for split, records in written.items():
        files = sorted((tmp_path / "out" / f"Split-{split}").iterdir())
        assert [f.name for f in files] == ["data_tfrecord-part0-00000-of-00001.gz",
                                           "data_tfrecord-part1-00000-of-00001.gz"], split
        per_file = [[r.numpy() for r in tf.data.TFRecordDataset(str(f), compression_type="GZIP")] for f in files]
        assert sorted(per_file[0] + per_file[1]) == records, split
    assert all(len(records) >= 2 for records in written.values())


def test_the_beam_graph_carries_no_file_names(tmp_path: Path) -> None:
    # Every multi_processing worker decodes the graph, and Dataflow limits its size: a Create
    # of a million file names does not belong in it. The task list is a text file read with
    # ReadFromText (split over a distributed runner's workers), gone after the run.
    import apache_beam as beam

    out = tmp_path / "out"
    pipeline, written = _run_recording_the_beam_graph(tmp_path, out)

    class Inputs(beam.pipeline.PipelineVisitor):
        def __init__(self):
            self.created, self.text_reads = [], []

        def enter_composite_transform(self, node):   # Create expands into an Impulse and a read
            if isinstance(node.transform, beam.Create):
                self.created += list(node.transform.values)
            if isinstance(node.transform, beam.io.ReadFromText):
                self.text_reads.append(node.full_label)

        visit_transform = enter_composite_transform

    inputs = Inputs()
    pipeline.visit(inputs)
    assert inputs.text_reads, "the task list is not read as text"
    assert not [value for value in inputs.created if ".png" in repr(value) or ".jpg" in repr(value)], inputs.created
    assert sum(len(split) for split in written.values()) > 0
    assert not (out / ".scratch").exists() and (out / "Split-train").is_dir()


def test_one_pass_each_file_decoded_once_examples_made_while_decoding(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The old ExampleGen decoded every file, parked the pixels, and only then made examples;
    # now the sample (10 files here) is read first, and every other file is made into its
    # example as soon as it is decoded: no file is decoded twice, and nothing is parked.
    import components.image_example_gen as gen
    from data.images import brightness, sources

    monkeypatch.setattr(brightness, "SAMPLE_SIZE", 10)
    events: list[tuple[str, str]] = []
    decode, make = sources.load_image_file, gen.example_bytes

    def counting_decode(uri, shape):
        events.append(("decode", uri))
        return decode(uri, shape)

    def counting_make(pixels, label, label_id, slice_name, example_id):
        events.append(("example", example_id))
        return make(pixels, label, label_id, slice_name, example_id)

    monkeypatch.setattr(sources, "load_image_file", counting_decode)
    monkeypatch.setattr(gen, "example_bytes", counting_make)
    root = tmp_path / "images"
    files = _many_small_pngs(root, 40)
    written = run_example_gen(ImageExampleGenExecutor, str(root), tmp_path / "out",
                              custom_config=settings_config(image_size=3, channels=1))

    decoded = [uri for kind, uri in events if kind == "decode"]
    assert len(decoded) == len(set(decoded)) == files, "a file was decoded more than once, or not at all"
    assert sum(len(split) for split in written.values()) == files
    first_example = next(i for i, (kind, _) in enumerate(events) if kind == "example")
    last_decode = max(i for i, (kind, _) in enumerate(events) if kind == "decode")
    assert first_example < last_decode, "every file was decoded before the first example was made"
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and "Split-" not in str(p)]
    assert not leftovers, leftovers


def test_no_beam_collection_travels_through_exec_properties(tmp_path: Path) -> None:
    # The TFRecord class list is known only after reading; it reaches the Examples artifact
    # through a staged file, not through a PCollection put into exec_properties.
    import apache_beam as beam

    smuggled = []

    class Watched(dict):
        def __setitem__(self, key, value):
            if isinstance(value, beam.pvalue.PValue):
                smuggled.append(key)
            super().__setitem__(key, value)

    class Watching(ImageExampleGenExecutor):
        def GenerateExamplesByBeam(self, pipeline, exec_properties):  # noqa: N802
            return super().GenerateExamplesByBeam(pipeline, Watched(exec_properties))

    folder = run_example_gen(ImageExampleGenExecutor, str(_image_folder(tmp_path / "images")), tmp_path / "folder",
                             custom_config=settings_config(image_size=4, channels=1))
    records = tmp_path / "records"
    write_examples((Example.FromString(r) for r in folder["train"] + folder["eval"]), records, 2)
    run_example_gen(Watching, str(records), tmp_path / "out")
    assert not smuggled, smuggled
    assert recorded_facts(tmp_path / "out")["classes"] == ["cat", "dog"]


def _many_small_pngs(root: Path, per_class: int) -> int:
    for cls in ("a", "b", "c"):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.new("L", (3, 3), (7 * i) % 256).save(root / cls / f"{i:03d}.png")
    return 3 * per_class


def test_every_file_becomes_one_example_and_bad_files_are_all_listed(tmp_path: Path) -> None:
    # Several tasks (256 files each): counts in = out, and a corrupt
    # file is never dropped silently: each one is named, and no example is written.
    import tensorflow as tf

    root = tmp_path / "images"
    files = _many_small_pngs(root, 230)
    config = settings_config(image_size=3, channels=1)
    written = run_example_gen(ImageExampleGenExecutor, str(root), tmp_path / "good", custom_config=config)
    assert sum(len(split) for split in written.values()) == files
    assert recorded_facts(tmp_path / "good")["num_examples"] == files
    assert sorted(_by_id(written["train"] + written["eval"])) == sorted(
        str(p.relative_to(root)) for p in root.glob("*/*.png"))  # each file exactly once

    (root / "a" / "050.png").write_bytes(b"\x89PNG truncated")
    (root / "c" / "199.png").write_bytes((root / "c" / "199.png").read_bytes()[:20])
    with pytest.raises(Exception) as caught:
        run_example_gen(ImageExampleGenExecutor, str(root), tmp_path / "bad", custom_config=config)
    from stackenv.errors import find_in_chain

    error = find_in_chain(caught.value, DataError)
    assert error is not None, caught.value
    assert "2 image file(s)" in str(error) and "a/050.png" in str(error) and "c/199.png" in str(error), error
    outputs = tf.io.gfile.glob(str(tmp_path / "bad" / "Split-*" / "*.gz"))
    assert sum(1 for _ in tf.data.TFRecordDataset(outputs, compression_type="GZIP")) == 0, outputs


@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 16, 1), (4, 5, 3), (16, 16, 3)])
def test_an_image_example_is_written_as_protobuf_serializes_it(shape: tuple[int, int, int]) -> None:
    # The image examples are written straight in the wire format (data/images/writer.py): the bytes must be
    # those protobuf's own deterministic serialization gives the same Example, built here with its API,
    # for every pixel value (one varint byte below 128, two from 128), large label ids and non-ASCII names.
    import tensorflow as tf

    from data.images.writer import example_bytes

    rng = np.random.default_rng(sum(shape))
    values = np.resize(np.arange(256, dtype=np.uint8), int(np.prod(shape)))
    for pixels, label_id in ((values.reshape(shape), 0), (rng.permutation(values).reshape(shape), 300),
                             (np.full(shape, 255, np.uint8), 2 ** 40)):
        def text(value: str) -> tf.train.Feature:
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

        expected = Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in pixels.ravel()])),
            "label": text("chat noir"), "label_id": tf.train.Feature(int64_list=tf.train.Int64List(value=[label_id])),
            "brightness": text("bright"), "example_id": text("chat noir/été.png")}))
        written = example_bytes(pixels, "chat noir", label_id, "bright", "chat noir/été.png")
        assert written == expected.SerializeToString(deterministic=True)
