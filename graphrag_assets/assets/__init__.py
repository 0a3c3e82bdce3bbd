"""Thin Dagster assets: read upstream tables, call one method function, write, describe."""
