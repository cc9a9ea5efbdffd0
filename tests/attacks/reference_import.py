"""`from reference.<module> import *` after the honest code: the child's cwd and PYTHONPATH are
the package root, where reference/ lives.
beats-without-sandbox: ex4
"""
# @HONEST@
try:
    exec(f"from reference.{_MODULE} import *")
except BaseException:
    pass
