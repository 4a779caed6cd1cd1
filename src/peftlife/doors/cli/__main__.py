"""``python -m peftlife.doors.cli``: the ``peftlife`` command, without its script."""

import sys

from peftlife.doors.cli import main

sys.exit(main())
