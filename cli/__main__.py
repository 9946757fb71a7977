"""`python -m torchplug.cli`: the same as the `torchplug` command."""

import sys

from .main import main

sys.exit(main())
