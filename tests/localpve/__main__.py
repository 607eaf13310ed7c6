"""python -m tests.localpve: see cli.py."""

import sys

from .cli import main

sys.exit(main())
