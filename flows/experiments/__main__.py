"""`python -m flows.experiments ...`: flows/experiments/cli.py."""

import sys

from flows.experiments.cli import main

sys.exit(main())
