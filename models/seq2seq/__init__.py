"""models/seq2seq: an encoder-decoder with attention that learns to continue text."""
