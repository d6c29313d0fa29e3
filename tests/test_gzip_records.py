"""The GZIP TFRecord writer the ExampleGens and Transform use (components/gzip_records.py): what
readers get is what Beam's WriteToTFRecord writes, and a failed write fails the step."""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf

from components import gzip_records


def test_records_read_back_in_order_through_tensorflow_and_gzip(tmp_path: Path) -> None:
    # Several chunks' worth (so the deflating thread hands over more than once), of poorly compressible
    # bytes like Transform's floats, and empty records.
    rng = np.random.default_rng(5)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 9000, 600)] + [b""]
    assert sum(map(len, records)) > 2 * gzip_records.CHUNK_BYTES
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([records]) | beam.FlatMap(lambda all_: all_)
             | gzip_records.write_gzip_tfrecords(str(tmp_path / "out" / "data_tfrecord")))
    files = sorted((tmp_path / "out").glob("data_tfrecord-*-of-*.gz"))
    assert len(files) == 1, files
    read = [r.numpy() for r in tf.data.TFRecordDataset([str(f) for f in files], compression_type="GZIP")]
    assert sorted(read) == sorted(records)  # Create does not promise an order across bundles
    beam_written = tmp_path / "beam"
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([records]) | beam.FlatMap(lambda all_: all_)
             | beam.io.WriteToTFRecord(str(beam_written / "data_tfrecord"), file_name_suffix=".gz"))
    beam_file = next(beam_written.glob("*.gz"))
    # The same TFRecord framing (lengths, CRCs) as Beam's: the decompressed streams hold the same records.
    assert len(gzip.open(files[0]).read()) == len(gzip.open(beam_file).read())


class _FailingFile:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        self.closed = True


def test_a_failed_write_raises_and_the_file_is_closed() -> None:
    raw = _FailingFile()
    out = gzip_records._DeflatedBeside(raw)
    with pytest.raises(OSError, match="No space left"):
        for _ in range(4):  # the second hand-over waits for the first, whose write failed
            out.write(b"x" * gzip_records.CHUNK_BYTES)
        out.close()
    out_closed = gzip_records._DeflatedBeside(_FailingFile())
    out_closed.write(b"small")
    with pytest.raises(OSError):
        out_closed.close()
    assert out_closed._raw.closed


def test_deflated_at_the_fastest_level() -> None:
    # A gzip header records the level class in its XFL byte: 4 for the fastest (RFC 1952, 2.3.1).
    class Memory:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> None:
            self.data += data

        def close(self) -> None:
            pass

    raw = Memory()
    out = gzip_records._DeflatedBeside(raw)
    out.write(b"record" * 1000)
    out.close()
    assert raw.data[8] == 4 and zlib.decompress(raw.data, 16 + zlib.MAX_WBITS) == b"record" * 1000
