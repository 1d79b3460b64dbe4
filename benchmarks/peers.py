"""``python -m benchmarks.peers``: the same as ``python -m benchmarks peers``
(``benchmarks/scenarios/peers.py``)."""

from __future__ import annotations

import sys

from benchmarks.scenarios.peers import main

if __name__ == "__main__":
    sys.exit(main())
