"""``python -m mlsched``: the same as the ``mlsched`` command."""

import sys

from mlsched.cli import main

sys.exit(main())
