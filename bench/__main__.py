"""``python -m bench``: see bench/README.md."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
