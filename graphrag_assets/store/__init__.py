"""DuckDB as the store: one table per artifact with a corpus column, plus a lineage table."""
