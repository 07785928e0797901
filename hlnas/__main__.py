"""``python -m hlnas`` = the ``hlnas`` command (machines where the console script is not installed)."""

import sys

from hlnas.cli.main import main

sys.exit(main())
