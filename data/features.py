"""Feature keys of image examples: the contract between data preparation and the models.

Every prepared image dataset is a set of GZIP-compressed TFRecord files of
``tf.train.Example`` protos with exactly these features:

``image`` (int64 list, length H*W*C)
    Pixel values 0..255 in row-major HWC order (``np.reshape(values, (H, W, C))``).
    H, W and C are the same for every example and are recorded in the dataset manifest
    (``DatasetManifest.image_shape``).
``label`` (bytes)
    The class name, UTF-8 encoded.
``label_id`` (int64)
    Index of ``label`` in the sorted list of class names (``DatasetManifest.classes``).
``brightness`` (bytes)
    ``"dark"``, ``"medium"`` or ``"bright"``: the tertile of the image's mean pixel
    intensity. The thresholds are the 1/3 and 2/3 quantiles of the per-image means of a
    seeded sample of the data set, the whole data set when it is no larger than the sample
    (``data/images/brightness.py``; stored in ``manifest.extra["brightness_thresholds"]``);
    an image whose mean is <= the first threshold is dark, <= the second medium, else
    bright. Used as the slicing feature for model evaluation.
``example_id`` (bytes)
    Stable identifier of the image, e.g. ``"digits/00017"``, the file's path relative to
    the folder root (``"cat/img_001.png"``) or ``"cifar/data_batch_1/123"``. Used for the
    hash-based train/eval split and to trace misclassified examples back to their source.
"""

IMAGE = "image"
LABEL = "label"
LABEL_ID = "label_id"
BRIGHTNESS = "brightness"
EXAMPLE_ID = "example_id"

BRIGHTNESS_BUCKETS = ("dark", "medium", "bright")

ALL_FEATURES = (IMAGE, LABEL, LABEL_ID, BRIGHTNESS, EXAMPLE_ID)
