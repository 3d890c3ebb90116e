"""`python -m kvcheck.cli` runs the command line."""

import sys

from kvcheck.cli.main import main

sys.exit(main())
