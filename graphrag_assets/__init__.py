"""GraphRAG ("From Local to Global") as Dagster software-defined assets stored in DuckDB."""
