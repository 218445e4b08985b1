"""Tiny test harness shared by the Python test files: check() records a result; finish() prints
'NAME: N passed, N failed' and exits non-zero on any failure."""
import sys

_passed = 0
_failed = 0


def check(name, ok, detail=""):
    global _passed, _failed
    if ok:
        _passed += 1
    else:
        _failed += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""), flush=True)
    return ok


def finish(suite):
    print(f"{suite}: {_passed} passed, {_failed} failed", flush=True)
    sys.exit(1 if _failed else 0)
