"""``python -m nodeagent --controller HOST:PORT ...``."""

import sys

from nodeagent.cli import main

if __name__ == "__main__":
    sys.exit(main())
