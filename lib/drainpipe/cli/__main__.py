"""``python -m drainpipe.cli``: the ``drainpipe`` command."""

import sys

from . import main

sys.exit(main())
