"""The offline engine: every step without a model, deterministic, labelled as such."""
