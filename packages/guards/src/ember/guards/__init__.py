"""ember.guards: guard IR -> one fast check function, with plain-words failures.

    check_fn = ember.guards.compile(guard_set, f_locals, f_globals)
    check_fn(f_locals, f_globals)          # -> bool
    check_fn.explain(f_locals, f_globals)  # -> "L['x'].size()[0] was 8, the graph assumed 4"
    check_fn.code                          # the generated source
"""

from ember.guards.builder import GuardBuilder, Part, eval_source, no_written_alias
from ember.guards.check_fn import CheckFn, CheckFunction, compile_guards, generate
from ember.guards.errors import GuardCompileError

compile = compile_guards

__all__ = [
    "CheckFn",
    "CheckFunction",
    "GuardBuilder",
    "GuardCompileError",
    "Part",
    "compile",
    "compile_guards",
    "eval_source",
    "generate",
    "no_written_alias",
]
