"""Text, document and graph embeddings, and their 2-D layouts."""
