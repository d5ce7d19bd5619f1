"""Adapters in a child process, so a stack that crashes or hangs becomes a finding.

`ccdiff replay --isolate` and `ccdiff matrix --isolate` start one `ccdiff serve`
on loopback and route every adapter stack to it (ccdiff/remote.py): native libraries and
Python adapters alike (a Python controller stuck in a loop hangs like C code; the
server opens both through stacks.open_adapter).  The server
forks per controller: a segfault, an abort or a Rust panic that unwinds past
the adapter ends that controller's connection only, and a step that does not
answer within the time limit is abandoned.  Replay records either as the
stack's `adapter-error` finding and goes on with the other stacks.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from .errors import SetupError
from .remote import env_name
from .stacks import load_recipes

START_WAIT_S = 20.0
PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM):
    """A Popen preexec_fn: the child gets `sig` when ccdiff dies, even by SIGKILL, so no
    helper process (isolation server, fuzzing engine) outlives the run that started it."""
    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    return preexec


@contextlib.contextmanager
def isolated(step_timeout_s: float = 60.0):
    """Route every native stack to a local `ccdiff serve` child for the duration."""
    log = tempfile.TemporaryFile(mode="w+")
    # Its own process group: the server forks a child per controller, and a child hung in
    # a stack's C code ignores SIGTERM and outlived the server (two orphans per hang).  The
    # group is SIGKILLed at the end; each child also dies with the server (serve.py).
    server = subprocess.Popen([sys.executable, "-m", "ccdiff", "serve", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.DEVNULL, stderr=log, preexec_fn=die_with_parent(),
                              process_group=0)
    saved = dict(os.environ)
    try:
        port = _wait_for_port(server, log)
        for name in load_recipes():
            os.environ[env_name(name)] = f"127.0.0.1:{port}"
        os.environ["CCDIFF_REMOTE_TIMEOUT"] = str(step_timeout_s)
        yield port
    finally:
        os.environ.clear()
        os.environ.update(saved)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)   # the server and every child it forked
        server.wait()
        log.close()


def _wait_for_port(server: subprocess.Popen, log) -> int:
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        log.seek(0)
        text = log.read()
        match = re.search(r" on 127\.0\.0\.1:(\d+)", text)
        if match:
            return int(match.group(1))
        if server.poll() is not None:
            raise SetupError(f"the isolation server exited ({server.returncode}): {text.strip()[-300:]}")
        time.sleep(0.05)
    raise SetupError(f"the isolation server did not start within {START_WAIT_S:g} s")
