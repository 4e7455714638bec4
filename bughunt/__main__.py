import sys

try:
    from .cli import main
except KeyboardInterrupt:        # Ctrl-C before the command's own handler is in place: nothing ran
    sys.stderr.write("bughunt: interrupted\n")
    sys.exit(130)

sys.exit(main())
