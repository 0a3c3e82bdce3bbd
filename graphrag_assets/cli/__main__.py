"""`python -m graphrag_assets.cli`: the same as `graphrag-assets`."""

import sys

from . import main

sys.exit(main())
