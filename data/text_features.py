"""Feature keys of text examples: the contract between text preparation and the models.

Every prepared text dataset is a set of GZIP-compressed TFRecord files of
``tf.train.Example`` protos, one per *window* of a document, with exactly these features
(all ``bytes``, UTF-8):

``context``
    ``context_words`` consecutive whitespace-separated words of the document, joined by
    single spaces (line breaks and runs of spaces are not kept).
``target``
    The ``target_words`` words that follow the context in the document, joined the same
    way. The model learns to continue ``context`` with ``target``.
``document``
    Id of the source document: the topic name for the default corpus (CPython's
    ``pydoc_data.topics``), the file's path relative to the source folder for a folder of
    documents (``data/text_files.py``), or the file name for a single file. Slicing feature, and the unit of
    the train/eval split (see ``SPLIT_FEATURE``).
``position``
    ``"start"``, ``"middle"`` or ``"end"``: the third of its document the window falls in
    (window ``i`` of ``n`` goes to bucket ``floor(3 * i / n)``). Second slicing feature:
    openings of documents (headings, definitions) read differently from their bodies.
``example_id``
    ``"<document>/<window index, 5 digits>"``; unique within a dataset, stable while the
    document and the window settings are unchanged.

Windows start every ``stride`` words; the window settings are recorded in the manifest
(``DatasetManifest.extra``: ``context_words``, ``target_words``, ``stride``, documents).

Why the split is not per window: with a stride smaller than ``context_words +
target_words``, neighbouring windows share most of their words, so a window-level split
would put almost every eval target word into some train window and the eval score would
measure memorisation. ``data.text_split`` holds out whole documents when there are
enough, else contiguous blocks inside documents with the straddling windows dropped, so
no eval word is in a train window either way.
"""

CONTEXT = "context"
TARGET = "target"
DOCUMENT = "document"
POSITION = "position"
EXAMPLE_ID = "example_id"

POSITION_BUCKETS = ("start", "middle", "end")

# The unit data.text_split holds out (whole, or in blocks); ExampleGen reads the split as written.
SPLIT_FEATURE = DOCUMENT
SLICING_FEATURES = (DOCUMENT, POSITION)

ALL_FEATURES = (CONTEXT, TARGET, DOCUMENT, POSITION, EXAMPLE_ID)
