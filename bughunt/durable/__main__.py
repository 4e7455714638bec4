import sys

from .examples import main

sys.exit(main())
