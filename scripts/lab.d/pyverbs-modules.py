#!/usr/bin/python3
# Prints the file of every Python module that rdma-core's test suite (python3-pyverbs) needs,
# one path a line, for the lab guest's copy of Python (lab.d/pyverbs.sh): the modules loaded
# by importing the whole suite the way run_tests.py does (--list-tests: every test module,
# pyverbs with its mlx5 and efa parts, unittest), then the ones the suite imports only while
# it runs (RUNTIME below). Built-in modules (Debian builds most C modules into the
# interpreter) have no file and are not printed.
#
#   pyverbs-modules.py TESTS_DIR     TESTS_DIR: a gunzipped copy of the suite
import contextlib
import importlib
import io
import os
import runpy
import sys

# Imported while tests run, not at load: multiprocessing's fork context, barrier and queue
# (the rdma_cm tests), the encodings a C or POSIX locale may ask for.
RUNTIME = ["multiprocessing.synchronize", "multiprocessing.queues", "multiprocessing.connection",
           "multiprocessing.popen_fork", "multiprocessing.util", "multiprocessing.resource_tracker",
           "multiprocessing.heap", "encodings.ascii", "encodings.latin_1"]

tests = os.path.abspath(sys.argv[1])
sys.path.insert(0, tests)
sys.argv = [os.path.join(tests, "run_tests.py"), "--list-tests"]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit:
        pass
for name in RUNTIME:
    importlib.import_module(name)
for name, module in sorted(sys.modules.items()):
    path = getattr(module, "__file__", None)
    # sitecustomize and _distutils_hack come from the host's site set-up (a .pth file of
    # setuptools), which the guest does not have.
    if name in ("sitecustomize", "_distutils_hack") or name.startswith("_distutils_hack."):
        continue
    if path and path.startswith("/usr/lib/python3") and not path.startswith(tests):
        print(path)
