"""Triage's replays in a forked child, so a stack that crashes on an input is a finding.

An engine's crash file runs through the stack's harness first (triage.native_failure),
but the harness stops where ccdiff's replay does not: with CCDIFF_FUZZ_NO_ABORT it
reports the first violation, while the replay goes on to the end of the trace and
minimization replays hundreds of cut-down traces.  msquic 2.5.1 shows the gap: its
window reaches 0 (numeric-error: the harness's last word), and the next ACK divides by
it (SIGFPE).  Replayed in ccdiff's own process, that ended the whole campaign with exit
136 and left every input after it untriaged.  Inputs are therefore triaged in a forked
child (ChildWorker: one child for every input until one crashes it, as a fork server
does, because a fork per input doubled the time of a triage); when a crash signal ends
the child, the input is triaged again with every replay probed in a child of its own
first (in_child), which names the trace the stack dies on.
"""
from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import traceback

# The signals by which a stack's native code dies (cli.py's CRASH_SIGNALS).
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE,
                 signal.SIGSYS, signal.SIGTRAP)


class StackCrashed(Exception):
    """A stack's native code died on `trace` (replayed through `specs`, probed in a child)."""

    def __init__(self, trace, signal_number: int, specs: list):
        super().__init__(f"the stack died of {signal.Signals(signal_number).name}")
        self.trace, self.signal_number, self.specs = trace, signal_number, list(specs)


def in_child(work):
    """(None, work()'s result) from a forked child, or (signal number, None) when a crash
    signal ended it.  A Python exception in the child is raised here, as if work() had
    run in this process; an exit by any other signal (a kill, the OOM killer) is a
    RuntimeError.  The result crosses back pickled through a pipe."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # the child
        os.close(read_end)
        code = 0
        try:
            try:
                outcome = ("ok", work())
            except BaseException as exc:              # KeyboardInterrupt too: the parent decides
                outcome = ("raise", exc)
            try:
                payload = pickle.dumps(outcome)
            except Exception:
                payload = pickle.dumps(("raise", RuntimeError("".join(traceback.format_exception(outcome[1])))))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = _uninterrupted(pipe.read)
    status = _uninterrupted(lambda: os.waitpid(pid, 0)[1])
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in CRASH_SIGNALS:
            return number, None
        raise RuntimeError(f"the triage child was ended by {signal.Signals(number).name}")
    if not payload:
        raise RuntimeError(f"the triage child exited {os.waitstatus_to_exitcode(status)} with no result")
    kind, value = pickle.loads(payload)
    if kind == "raise":
        raise value
    return None, value


class ChildWorker:
    """A forked child that runs `work(*args)` for each call in turn, as in_child does for
    one: (None, result), or (crash signal, None) when one kills it (the next call forks a
    new child, from this process as it is then).  The child lives until close(), until
    this process ends (its requests pipe closes), or until a call crashes it."""

    def __init__(self, work):
        self.work = work
        self.pid = None
        self.requests = self.answers = None

    def call(self, *args):
        if self.pid is None:
            self._start()
        try:
            _send(self.requests, pickle.dumps(args))
            payload = _uninterrupted(lambda: _receive(self.answers))
        except BrokenPipeError:
            payload = None
        if payload is None:                              # the child died during the call
            status = self._reap()
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) in CRASH_SIGNALS:
                return os.WTERMSIG(status), None
            raise RuntimeError(f"the triage child ended (wait status {status}) without an answer")
        kind, value = pickle.loads(payload)
        if kind == "raise":
            if isinstance(value, KeyboardInterrupt):      # the child has left its loop
                self._reap()
            raise value
        return None, value

    def close(self) -> None:
        if self.pid is not None:
            self.requests.close()                         # the child reads EOF and exits
            self._reap()

    def _start(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(request_write)
            os.close(answer_read)
            self._serve(os.fdopen(request_read, "rb"), os.fdopen(answer_write, "wb"))
        os.close(request_read)
        os.close(answer_write)
        self.pid = pid
        self.requests, self.answers = os.fdopen(request_write, "wb"), os.fdopen(answer_read, "rb")

    def _serve(self, requests, answers) -> None:
        code = 0
        try:
            while True:
                payload = _receive(requests)
                if payload is None:
                    break
                try:
                    outcome = ("ok", self.work(*pickle.loads(payload)))
                except BaseException as exc:
                    outcome = ("raise", exc)
                try:
                    answer = pickle.dumps(outcome)
                except Exception:
                    answer = pickle.dumps(("raise", RuntimeError("".join(traceback.format_exception(outcome[1])))))
                sys.stdout.flush()
                sys.stderr.flush()
                _send(answers, answer)
                if isinstance(outcome[1], KeyboardInterrupt):
                    break
        except BaseException:
            code = 70
        finally:
            os._exit(code)

    def _reap(self) -> int:
        pid, self.pid = self.pid, None
        for pipe in (self.requests, self.answers):
            try:
                pipe.close()
            except OSError:
                pass
        return _uninterrupted(lambda: os.waitpid(pid, 0)[1])


def _send(pipe, payload: bytes) -> None:
    pipe.write(struct.pack("<Q", len(payload)) + payload)
    pipe.flush()


def _receive(pipe) -> bytes | None:
    """One length-prefixed message, or None at the end of the pipe (the writer is gone)."""
    header = pipe.read(8)
    if len(header) < 8:
        return None
    size = struct.unpack("<Q", header)[0]
    payload = pipe.read(size)
    return payload if len(payload) == size else None


def crash_signal(work) -> int | None:
    """The crash signal `work` dies of in a child, or None when it returns (its result and
    any exception are dropped: the caller runs it again in process, which is then safe)."""
    def quiet():
        try:
            work()
        except Exception:
            pass
    number, _ = in_child(quiet)
    return number


def _uninterrupted(call):
    """Ctrl-C reaches the child too (one process group): wait for it to finish and answer,
    then raise the interrupt here, so no child is left unreaped."""
    interrupted = False
    while True:
        try:
            result = call()
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt
    return result
