"""``python -m bench.paper``: the paper-replication harness, run from a checkout."""

import sys

from bench.paper.run import main

if __name__ == "__main__":
    sys.exit(main())
