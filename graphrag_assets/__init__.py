"""GraphRAG ("From Local to Global") as Dagster software-defined assets stored in DuckDB."""

import os

# Polars' allocator (jemalloc) keeps memory its frames freed, for speed, unless told to return it: then an index
# step's frames, freed when the step ends, would stay with the process through every later step, and a run's peak
# would be the sum of its steps' rather than the largest. Measured by `scripts/benchmark.py frames`. Set before
# polars loads; a value the user exported wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
