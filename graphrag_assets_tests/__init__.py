"""The test suite. Under pytest, everything a run makes where a test names no place for it (store, response cache,
vector indexes, exports) goes to a folder of the session's, never the checkout's .graphrag/: set here, before the
project is imported, and inherited by every process a test starts. Benchmarks that import the test server alone
are left as they are."""

import os
import sys
import tempfile
from pathlib import Path

TEST_STATE = Path(tempfile.mkdtemp(prefix="graphrag-assets-tests-")) if "pytest" in sys.modules else None
if TEST_STATE is not None:
    os.environ["GRAPHRAG_HOME"] = str(TEST_STATE)
