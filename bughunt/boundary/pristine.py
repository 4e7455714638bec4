"""A kill is a new process: the conformance suite's steps after a simulated crash, each in a
process that never ran the store before.

A kill -9 ends the process: whatever the store kept in memory (a module-level dict, a class
attribute, a cache) is gone, and the resume starts in a new process that has only the disk. The
conformance suite simulates every crash state of one recorded run, so the process that recorded
the run (and wrote every byte of it) must never be the one that loads those bytes back: it still
holds the store's memory, and a store that never wrote a file would "recover" everything.

So the boundary's child forks, before it imports any learner code, a **pristine** process
(`start`, called by `child.main`). When the suite first needs a new process it sends the pristine
process the store's spec: the pristine process imports the store's file then (a new process does
that first too) and, for each step it is given, forks a process that runs the step and answers,
then exits. After each simulated crash the suite asks for three (`conformance.FreshProcesses`):
the judged `load()` and the first repair (nothing was written in that process before the load),
the second repair and the resume's commit, and the read-back `load()`. Each has the store's module
as a fresh import left it, and nothing any call into the store did before. Forking (instead of starting `python` for each step) costs a millisecond or two per step
instead of a hundred; what this gives up against a real new process is only what an import
reads of the world that differs between two imports (the time, the pid).

How a step's process ends is told as the boundary tells it: a result; a `fence.StoreStopped`
(re-raised here with the same record); an end of the process (os._exit, a signal, SIGSTOP) that the
suite's process then repeats on itself, so that the boundary sees the death it names ("the store
ended its process with os._exit(0), in MyStore.load, at the crash state ...") from the calls into
the store the step's process announced.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from .channel import Channel

#: The suite's end of the socket to the pristine process, and its pid (one per boundary child).
_PRISTINE: list = []


def start(lab_channel: int) -> None:
    """Fork the pristine process (before any learner code is imported in this process). It
    closes `lab_channel`, the descriptor of the lab's channel: neither it nor the processes it
    forks can write there; what they have to say (where the store is) goes to the suite's
    process, which passes it on (`run`)."""
    if _PRISTINE:
        return
    ours, theirs = (_unnamed(s) for s in socket.socketpair())
    pid = os.fork()
    if pid == 0:                                  # the pristine process: it never returns
        code = 70
        try:
            ours.close()
            os.close(lab_channel)
            from . import child
            channel = Channel(theirs)
            child._tag(channel, None)
            code = _serve(channel)
        finally:
            os._exit(code)
    theirs.close()
    _PRISTINE.append((Channel(ours), pid))


def _unnamed(sock: socket.socket) -> socket.socket:
    """`sock` moved to a descriptor number nothing names (as the lab's channel is, `child.main`),
    far from the 3, 4, 5 a store would try first."""
    import fcntl

    fd = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, 256 + (os.getpid() * 7) % 256)
    sock.close()
    return socket.socket(fileno=fd)


#: The exit status of a pristine process that read a frame that does not parse: the store wrote
#: to its socket.
DAMAGED = 87


def available() -> bool:
    return bool(_PRISTINE)


def _serve(channel: Channel) -> int:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    from . import child

    imported: set[str] = set()
    while True:
        try:
            request = channel.recv()
        except ValueError:                        # not the suite's: the store wrote it
            return DAMAGED
        if request is None:
            return 0
        job = request.get("job", "")
        if not isinstance(job, str) or not job.startswith(STEPS):
            channel.send({"t": "end", "code": None, "seq": None})
            continue                              # only the suite's steps, whoever asks
        seq = request.get("seq")
        child._tag(seq=seq)
        if job not in imported:          # the lab's module, imported once (then every fork has it)
            imported.add(job)
            try:
                from . import child
                child._job_entry(job)
            except Exception:           # noqa: the step's process says it
                pass
        spec = request.get("spec")
        if spec and spec not in imported:
            imported.add(spec)
            try:                    # what a new process does first: import the store's file
                from ..stores import store_class
                store_class(spec)
            except BaseException:   # noqa: the step's process imports it again and says why
                pass
        pid = os.fork()
        if pid == 0:
            _step(channel, request)               # never returns
        while True:
            _, status = os.waitpid(pid, os.WUNTRACED)
            if os.WIFSTOPPED(status):
                os.kill(pid, signal.SIGKILL)
                channel.send({"t": "end", "stopped": os.WSTOPSIG(status), "seq": seq})
                os.waitpid(pid, 0)
                break
            channel.send({"t": "end", "code": os.waitstatus_to_exitcode(status), "seq": seq})
            break


def _step(channel: Channel, request: dict) -> None:
    from . import child
    from . import fence as _fence

    code = 0
    try:
        child.set_state(request.get("at"))
        fn = child._job_entry(request["job"])
        try:
            answer = {"t": "result", "result": fn(**request.get("args", {}))}
        except _fence.StoreStopped as e:
            answer = {"t": "stopped", "record": e.record}
        except BaseException as e:               # noqa: told to the suite, which says it
            answer = {"t": "raised", **child.describe_failure(e)}
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        channel.send({**answer, "seq": request.get("seq")})
    except BaseException:                        # noqa: nothing of a step may reach the loop
        code = 70
    os._exit(code)


#: The only jobs the pristine process runs (a request on its socket may be the store's).
STEPS = "bughunt.conformance:_fresh_"

#: The record of a frame on the pristine process's socket that answers no request of the suite.
FORGED = {"kind": "channel", "where": "", "dir": "",
          "sentence": "the store wrote to the lab's channel (a frame that answers no request of "
                      "the lab's, between the suite and the process it loads a crash state in); "
                      "the lab stopped it"}


class StepFailed(Exception):
    """The lab's own step raised in the new process (its type, words and traceback)."""


def run_fresh(job: str, args: dict, *, spec: str, at: str | None = None):
    """Run `job` ("module:function", called with `args`) in a new process forked from the
    pristine one, and return what it returned. A StoreStopped there is raised here; an end of
    that process is repeated by this one (see the module's docstring)."""
    from . import fence as _fence

    import secrets

    from . import child

    channel, pid = _PRISTINE[0]
    seq = secrets.token_hex(16)
    try:
        channel.send({"t": "step", "job": job, "args": args, "spec": spec, "at": at, "seq": seq})
    except OSError:                               # the pristine process is gone
        _gone(pid)
    answer = None
    while True:
        try:
            message = channel.recv()
        except ValueError:                        # a frame that does not parse
            raise _fence.StoreStopped(dict(FORGED)) from None
        if message is None:                       # the pristine process is gone
            _gone(pid)
        if message.get("seq") != seq or (answer is not None and message["t"] != "end"):
            raise _fence.StoreStopped(dict(FORGED))
        if message["t"] == "end":
            break
        if message["t"] == "status":              # passed on to the lab, as this request's
            child.status({k: v for k, v in message.items() if k not in ("t", "seq")})
            continue
        answer = message
    if answer is not None:
        if answer["t"] == "result":
            return answer["result"]
        if answer["t"] == "stopped":
            raise _fence.StoreStopped(answer["record"])
        raise StepFailed(f"{answer.get('type')}: {answer.get('text')}\n"
                         f"{answer.get('traceback', '')}")
    _die(message.get("code"), message.get("stopped"), answer)


def _gone(pid: int) -> None:
    """The pristine process ended: because the store wrote to its socket (`FORGED`), or, with no
    step's answer, as `_die` says."""
    from . import fence as _fence

    try:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        code = None
    if code == DAMAGED:
        raise _fence.StoreStopped(dict(FORGED))
    _die(None, None, None)


def _die(code, stopped, answer) -> None:
    """The step's process ended without answering: end this one the same way."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if stopped:
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(70)
    if code is not None and code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code is not None and code >= 0 else 70)
