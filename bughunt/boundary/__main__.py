"""`python -m bughunt.boundary FD`: the boundary's child process (`child.main`), started by the
supervisor, never by hand."""

import os
import sys

from bughunt.boundary import child

# No atexit handler, no finalizer of the store's runs after the lab is done with it.
code = child.main(sys.argv[1:])
try:
    sys.stdout.flush()
    sys.stderr.flush()
finally:
    os._exit(code)
