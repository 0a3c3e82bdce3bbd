"""The test suite. Everything a run makes where a test names no place for it (store, response cache, vector
indexes, exports) goes to a folder of the session's, never the checkout's .graphrag/: set here, before the project
is imported, and inherited by every process a test starts."""

import os
import tempfile
from pathlib import Path

TEST_STATE = Path(tempfile.mkdtemp(prefix="graphrag-assets-tests-"))
os.environ["GRAPHRAG_HOME"] = str(TEST_STATE)
