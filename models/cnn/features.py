"""Feature names of the CNN family: raw keys (the data contract) and transformed keys."""
from data.features import BRIGHTNESS, EXAMPLE_ID, IMAGE, LABEL, LABEL_ID  # noqa: F401
from models.common.signatures import transformed_name

IMAGE_XF = transformed_name(IMAGE)             # standardised per pixel (the CNN's input)
IMAGE_UNIT_XF = transformed_name(IMAGE + "_unit")  # scaled to [0, 1] (a pretrained base model's input)
LABEL_XF = transformed_name(LABEL)
LABEL_VOCABULARY = "label"   # TFT vocabulary file name: class names in id order
# Raw features preprocessing_fn reads: what the Trainer and the Tuner parse of ExampleGen's examples.
RAW_INPUTS = (IMAGE, LABEL)
# Raw features a serving request does not carry.
LABEL_KEYS = (LABEL, LABEL_ID)
