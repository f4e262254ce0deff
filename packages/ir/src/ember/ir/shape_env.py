"""Where ``ember.ir.shape_env`` used to be (ember-ir 0.1.1 and earlier), kept so that
released stages (ember-dynamo, -aotgrad, -inductor 0.1.x) still import it beside this
ember-ir (ADR 0054, ADR 0066). It *is* :mod:`ember.ir.shapes.shape_env` (the same module
object, so state and monkeypatches are shared). New code imports :mod:`ember.ir.shapes`;
``tools/check_imports.py`` refuses this path in the packages.
"""

import sys

from ember.ir.shapes import shape_env as _module

sys.modules[__name__] = _module
