"""pipeline.local."""
