"""The ``seq2seq`` family: an LSTM encoder-decoder with attention continuing text
(models/seq2seq/), gated on top-5 next-word accuracy.

Functions import their code when called, so registering the family stays cheap (see
``pipeline/families/registry.py``).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pipeline.families.registry import (
    BatchMemory,
    Memory,
    ModelCard,
    ModelFamily,
    NoTflite,
    ReportParts,
    RunConfig,
    Scoring,
    TrainingDefaults,
    Tuning,
    option,
    register,
)
from pipeline.settings import check_values

if TYPE_CHECKING:
    from stackenv.tfma import tfma

    from tensorflow_metadata.proto.v0 import schema_pb2

    from data.tfrecords import DatasetManifest


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """Examples are windows of N context words -> the next K words; the vocabulary keeps V tokens."""

    context_words: int = option("--context-words", 16, low=1, high=512,
                                help="seq2seq: words of context per example")
    target_words: int = option("--target-words", 4, low=1, high=64, help="seq2seq: words to continue per example")
    # Most frequent tokens kept (+ reserved ids and 1 OOV bucket).
    vocab_size: int = option("--vocab-size", 4000, low=2, high=1_000_000,
                             help="seq2seq: tokens kept in the vocabulary")
    # The corpus budget (data/text_corpus.py): a few MB of gzip can hold GBs of text.
    max_text_mb: int = option("--max-text-mb", 1024, low=1, high=1_000_000,
                              help="seq2seq: the most text --data may hold in all once decompressed, in MiB (a run "
                                   "past it stops naming the file that reached it)")

    def __post_init__(self) -> None:
        check_values(self)


def prepare_text(config: RunConfig) -> DatasetManifest:
    from data.text import prepare_text_dataset

    settings = config.family_settings
    return prepare_text_dataset(config.data, config.data_cache_dir, context_words=settings.context_words,
                                target_words=settings.target_words, max_text_mb=settings.max_text_mb,
                                follow_links=config.follow_links)


def text_example_gen(config: RunConfig):
    from components.text_example_gen import text_example_gen

    settings = config.family_settings
    return text_example_gen(config.data, context_words=settings.context_words, target_words=settings.target_words,
                            span_pattern=config.span_pattern, spans=config.spans, max_text_mb=settings.max_text_mb,
                            follow_links=config.follow_links)


def _score_config(config: RunConfig, dataset: DatasetManifest) -> dict[str, Any]:
    return {"context_words": config.family_settings.context_words}


def _transform_config(config: RunConfig, dataset: DatasetManifest) -> dict[str, Any]:
    # Token windows are wider than word windows: punctuation becomes tokens of its own.
    settings = config.family_settings
    return {"vocab_size": settings.vocab_size, "context_tokens": 2 * settings.context_words,
            "target_tokens": 2 * settings.target_words}


def _eval_config(config: RunConfig, dataset: DatasetManifest) -> tfma.EvalConfig:
    from models.seq2seq.evaluation import eval_config

    return eval_config(config.min_accuracy, config.max_regression)


def curate_text_schema(schema: schema_pb2.Schema) -> None:
    """Documents and windows are open-ended; only the position buckets are a closed set."""
    from data import text_features
    from pipeline.families.schema_curation import keep_string_domains

    keep_string_domains(schema, [text_features.POSITION])


#: Growth of the Trainer's peak RSS per example over the formula's bytes: the largest factor
#: ``benchmarks/memory_factors.py`` measured, rounded up.
MEMORY_FACTOR = 6.0


def bytes_per_example(context_tokens: int, target_tokens: int, vocab_size: int, units: int = 256,
                      embedding_dim: int = 128, factor: float = MEMORY_FACTOR) -> float:
    """float32 logits over the vocabulary (+ OOV) for each target token, and the embeddings and LSTM states."""
    return factor * 4 * (target_tokens * (vocab_size + 1) + (context_tokens + target_tokens) * (units + embedding_dim))


def batch_memory(config: RunConfig) -> BatchMemory:
    settings = config.family_settings
    # Token windows are twice the words, as Transform is configured (_transform_config).
    return BatchMemory(bytes_per_example(2 * settings.context_words, 2 * settings.target_words, settings.vocab_size),
                       f"{settings.context_words}+{settings.target_words}-word windows over a {settings.vocab_size}-"
                       "token vocabulary", "--vocab-size")


def eval_output_bytes(config: RunConfig) -> float:
    """The served model's float32 probabilities over the vocabulary (+ OOV) for one window."""
    return 4.0 * (config.family_settings.vocab_size + 1)


FAMILY = register(ModelFamily(
    name="seq2seq",
    description="text continuation",
    data_help=("a text file or a folder of documents, one per file: .txt, .md, .rst, .html, also .gz/.bz2/.xz, "
               "in sub-folders too; files that yield no window are skipped and named (default: the Python "
               "Language Reference prose shipped with CPython)"),
    # No fixed floor: what top-5 a text allows depends on the text, so the gate is its own strongest n-gram
    # reference + --gate-margin (a floor of the default corpus's bigram, 0.36, refused every small text).
    defaults=TrainingDefaults(epochs=6, batch_size=64, learning_rate=3e-3, min_accuracy=0.0,
                              min_accuracy_note="gated on its strongest n-gram reference",
                              epochs_note=("at most, and 20000 steps or 30 minutes of training at most: the "
                                           "held-out top-5 is checked that many times, evenly, training stops "
                                           "early after 2 checks without a better one, and the best is kept")),
    # TFMA's name of the top-5 SparseTopKCategoricalAccuracy (models/seq2seq/evaluation.py: GATE_METRIC).
    gate_metric="sparse_top_k_categorical_accuracy",
    gate_metric_label="Top-5 next-word accuracy",
    preprocessing_fn="models.seq2seq.preprocessing.preprocessing_fn",
    run_fn="models.seq2seq.trainer.run_fn",
    prepare_data=prepare_text,
    example_gen=text_example_gen,
    transform_config=_transform_config,
    eval_config=_eval_config,
    # Whole documents go to one split: overlapping windows of one text must not leak from
    # train into eval (README: "Text data").
    split_feature="document",
    curate_schema=curate_text_schema,
    slicing_features=("document", "position"),
    report=ReportParts(pictures="pipeline.report.pictures_seq2seq.seq2seq_pictures",
                       samples="pipeline.report.pictures_seq2seq.sample_generations",
                       samples_title="Sample generations (greedy, held-out documents)"),
    settings_type=TextSettings,
    tuning=Tuning(tuner_fn="models.seq2seq.tuning.tuner_fn", search_space="models.seq2seq.hparams.SEARCH_SPACE"),
    default_data="the Python Language Reference prose shipped with CPython (pydoc topics)",
    memory=Memory(batch=batch_memory, eval_output_bytes=eval_output_bytes),
    # TFMA names of models/seq2seq/evaluation.py (ACCURACY, KNOWN_TOP5, KNOWN_TOP1): `generate` never emits the
    # OOV id, so the figures on known next words say what it can use.
    summary_metrics=(("top-1", "sparse_categorical_accuracy"),
                     ("on known next words (what generate can emit): top-5", "known_word_top_k_accuracy"),
                     ("top-1", "known_word_accuracy")),
    card=ModelCard(
        intended_use=("Suggesting the next words of prose like the training corpus (next-word ranking, short "
                      "continuations); a demonstration of a gated TFX pipeline for text, not a general language "
                      "model."),
        known_limits=(
            "Trained on a small corpus: continuations repeat its phrasing and are often ungrammatical past a few "
            "words.",
            "The vocabulary is the corpus' most frequent tokens; other words become <unk>.",
            "The gate checks top-5 next-word accuracy on held-out documents, not the quality of generated text.",
        )),
    scoring=Scoring(reader="data.scoring.text_example", config=_score_config,
                    outputs=("top_k_tokens", "top_k_probabilities")),   # models/seq2seq/export.py, serving_default
    # Measured in docs/tflite.md: converts only with TF select ops, and then fails at its first
    # call, since TFLite does not initialise the vocabulary tables TFT reads from asset files.
    tflite=NoTflite("no TFLite for the seq2seq family: its serving graph needs TF select ops (LSTM tensor lists, "
                    "string tokenization, the decode loop) and the TFLite interpreter does not initialise its "
                    "vocabulary tables (docs/tflite.md)"),
))
