"""``python -m stackenv.s3_filesystem``: build the s3:// filesystem plugin (make setup, the pipeline image)."""
import sys

from stackenv.errors import ProjectError
from stackenv.s3_filesystem import build

try:
    print(f"Built TensorFlow's s3:// filesystem: {build()}")
except ProjectError as error:
    print(f"error: {error.paragraph}", file=sys.stderr)
    sys.exit(1)
