"""models/cnn."""
