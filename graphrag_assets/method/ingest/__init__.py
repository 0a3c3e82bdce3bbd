"""Corpus files to documents and token chunks."""
