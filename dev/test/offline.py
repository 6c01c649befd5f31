"""Offline helpers shared by the data-preparation tests (test_data_prep.py, test_fineweb.py,
test_hellaswag_prep.py): a script run with every network connection refused, and the same for the test
process itself, so that a download attempt (requests, urllib, huggingface_hub) fails at once."""
import socket
import sys

# Runs a script (argv[1], its arguments after it) with socket connects and name lookups refused, and with
# the modules named in $BLOCK_MODULES (comma-separated) made unimportable.
OFFLINE = """
import os, runpy, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network access is blocked in this test")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
for name in filter(None, os.environ.get("BLOCK_MODULES", "").split(",")):
    sys.modules[name] = None
sys.argv = sys.argv[1:]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def offline_argv(script, *args):
    """argv that runs `script` with `args` (str()-ed) under OFFLINE, with this Python."""
    return [sys.executable, "-c", OFFLINE, str(script), *map(str, args)]


def refuse(*args, **kwargs):
    """What every socket connect and name lookup does in these tests."""
    raise OSError("network access is blocked in this test")


def block_network(monkeypatch):
    """No network in the test process itself (for in-process runs of the scripts)."""
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
