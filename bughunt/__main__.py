import sys

from .interrupts import Interrupted, interruptible

# Ctrl-C and SIGTERM raise `Interrupted` from here on, while the command's modules are still
# being imported too: a SIGTERM then used to end the process by its default action (-15, no
# sentence), a Ctrl-C with a traceback. Only Python's own start, before this line, is not covered.
try:
    with interruptible():
        from .cli import main
        code = main()
except Interrupted as e:         # before the command's own handler is in place: nothing ran
    sys.stderr.write(f"bughunt: {e.what}\n")
    code = e.code
sys.exit(code)
