"""pipeline.results."""
