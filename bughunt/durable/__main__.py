import sys

from .examples import run_cli    # Ctrl-C while importing: this package's __init__ says so

sys.exit(run_cli())
