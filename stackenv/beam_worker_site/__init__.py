"""A folder for PYTHONPATH, not a module to import: its sitecustomize.py runs in processes a step starts."""
