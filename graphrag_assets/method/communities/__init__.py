"""Hierarchical Leiden communities and their reports (the paper's section 3.1.5)."""
