"""``python -m sixdim`` is ``sixdim``."""

import sys

from sixdim.cli import main

sys.exit(main())
