"""Where ``ember.ir.fake_mode`` used to be (ember-ir 0.1.1 and earlier), kept so that
released stages (ember-dynamo, -aotgrad, -inductor 0.1.x) still import it beside this
ember-ir (ADR 0054, ADR 0066). It *is* :mod:`ember.ir.shapes.fake_mode` (the same module
object, so state and monkeypatches are shared). New code imports :mod:`ember.ir.shapes`;
``tools/check_imports.py`` refuses this path in the packages.
"""

import sys

from ember.ir.shapes import fake_mode as _module

sys.modules[__name__] = _module
