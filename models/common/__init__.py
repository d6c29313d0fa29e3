"""models/common."""
