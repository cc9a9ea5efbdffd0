import os, time, threading
def tl(what):
    p = os.environ.get("GRADERS_TIMELINE")
    if p:
        with open(p, "a") as f:
            f.write(f"{time.time():.3f} {os.getpid()} {threading.current_thread().name[:12]} {what}\n")
