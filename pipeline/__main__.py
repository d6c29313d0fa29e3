"""``python -m pipeline``: see pipeline/cli.py."""
from pipeline.cli import entry_point

entry_point()
