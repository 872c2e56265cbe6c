"""Real-model tree speculative decoding (filled below)."""
