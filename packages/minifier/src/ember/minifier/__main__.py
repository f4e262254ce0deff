"""``python -m ember.minifier``; see `ember.minifier.cli`."""

import sys

from ember.minifier.cli import main

sys.exit(main())
