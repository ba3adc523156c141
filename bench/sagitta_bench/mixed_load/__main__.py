"""``python -m sagitta_bench.mixed_load``."""

import sys

from .run import main

sys.exit(main())
