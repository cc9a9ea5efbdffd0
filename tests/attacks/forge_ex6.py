"""Exercise 6 only: forged memory figures far below what any gradient of the model needs (1, 2
and 3 bytes for "full", "dots" and None), and a temp_memory_bytes that agrees with them. Before
issue 31 the worker compiled each variant and sent these figures, the memory checks compared them
with the grader's own figures only from above (no more than), and temp_memory_bytes only with the
figure the worker sent. Now the judge compiles the programs itself and holds temp_memory_bytes to
its own figures: a variant reply with figures and no programs earns no check that reads one.
exercises: ex6
"""
_probes = _sys.modules["graders.exercises." + _MODULE + ".probes"]
_FIGURES = {None: 3, "dots": 2, "full": 1}


def _variant(sol, cfg, remat, *args):
    return {"structure": {"error": ["failed", "forged"]}, "memory": {"temp_size_in_bytes": _FIGURES[remat]},
            "params": None, "params_error": "forged", "outs": [], "grads": []}


def _temp_memory_bytes(sol, cfg, seeds, stacks, *args):
    return [{"value": 1, "type": "int", "repr": "1"} for _ in stacks]


_variant.is_probe = _temp_memory_bytes.is_probe = True
_probes.variant = _variant
_probes.temp_memory_bytes = _temp_memory_bytes
