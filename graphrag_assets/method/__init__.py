"""The GraphRAG method as plain Python: no Dagster import anywhere below this package."""
