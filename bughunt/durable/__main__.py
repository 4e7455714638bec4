import sys

from .examples import run_cli

sys.exit(run_cli())
