"""Exercise 6: a policy's name forged. At import the module makes the variant probe send, for
remat='dots', the programs of remat='full' (one checkpoint around each whole block, no policy)
with every checkpoint's policy renamed dots_saveable in the message; every other variant is sent
as it is. Appended to a right per-block model (tests/test_forged_evidence.py), so only the two
'dots' checks are at stake: the judge reads what the checkpoints keep from the gradient's
dataflow and measures the memory itself, and neither is dots_saveable's."""
import types as _types

_P = _sys.modules["graders.exercises." + _MODULE + ".probes"]
_ORIG_VARIANT = _types.FunctionType(_P.variant.__code__, _P.variant.__globals__, "variant", _P.variant.__defaults__)


def _relabel(data):
    if isinstance(data, dict):
        if set(data) == {"policy"} and data["policy"] is None:
            return data
        return {k: ({"policy": "dots_saveable"} if k == "policy" and v is None else _relabel(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [_relabel(v) for v in data]
    return data


def _variant(sol, cfg, remat, seeds, stacks, x, y, runs):
    if remat != "dots":
        return sol._ORIG_VARIANT(sol, cfg, remat, seeds, stacks, x, y, runs)
    reply = sol._ORIG_VARIANT(sol, cfg, "full", seeds, stacks, x, y, runs)
    reply["gradient"] = sol._relabel(reply["gradient"])
    reply["forward"] = sol._relabel(reply["forward"])
    return reply


_install("variant", _variant)
