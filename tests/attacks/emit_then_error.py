"""Like stack_emit, but ends with an import error instead of "done": the exercise is reported as
an error, and the forged passes must still count for nothing (in the printed total, in
results.json's score and in its tests alike). An exercise that ends in an error earns nothing,
with or without --sandbox, so this one is beaten both ways.
"""
_f = _sys._getframe()
while _f is not None and "emit" not in _f.f_locals:
    _f = _f.f_back
if _f is not None:
    _emit = _f.f_locals["emit"]
    for _n in _NAMES:
        _emit(event="outcome", check=_n, outcome="passed", message="")
    _emit(event="import_error", message="nothing to see")
    _os._exit(0)
