"""The launcher every local REPL and kernel is started through (`python -m` this module).

    launch.py [--confine [--write DIR]... [--write-file PATH]... [--no-network]
               [--bind-ports-from CONNECTION_FILE]] [--follow-parent PID] -- PROGRAM ARGS...

It stays as the program's tiny parent, so that:
- the program's parent is not the server (`os.kill(os.getppid(), 9)` ends this launcher, and
  with it the REPL, never the server);
- it is a child subreaper (Linux): whatever the program starts, daemons that `setsid` or fork
  twice included, stays in its tree, and all of it is killed when the program ends or this
  launcher is told to stop (SIGTERM / SIGHUP);
- with --confine, the program runs under Landlock rules built here before the fork (a rule
  that cannot be enforced stops everything with exit status 126 and says why) and applied
  in the child just before the exec, so they bind the program and all it starts. This
  launcher stays outside them: confined code cannot signal it (Landlock ABI 6 scoping).
Standard library only, and quick: it runs before every REPL start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time

from . import landlock

REFUSED = 126  # exit status: the sandbox could not be set up (the reason is on stderr)
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_PORT_KEYS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="oi-lsp-sandbox")
    parser.add_argument("--confine", action="store_true")
    parser.add_argument("--any-write", action="store_true")  # confine the network only
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--write-file", action="append", default=[])
    parser.add_argument("--no-network", action="store_true")
    parser.add_argument("--bind-ports-from")
    parser.add_argument("--follow-parent", type=int, metavar="PID")  # the server
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        parser.error("no program to start")
    return args


def _ports(path: str | None) -> tuple[int, ...]:
    """A Jupyter kernel binds the five ports of its connection file: with no network, those
    binds (and only those) are allowed."""
    if path is None:
        return ()
    with open(path, encoding="utf-8") as file:
        info = json.load(file)
    return tuple(int(info[key]) for key in _PORT_KEYS if info.get(key))


def _ruleset(args: argparse.Namespace) -> int | None:
    if not args.confine:
        return None
    rules = landlock.Rules(write=landlock.paths(args.write), write_files=tuple(args.write_file),
                           network=not args.no_network,
                           bind_ports=_ports(args.bind_ports_from), fs=not args.any_write)
    return landlock.ruleset(rules)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        landlock.prctl(option, value)


def descendants(root: int) -> list[int]:
    """Every process below `root`, read from /proc (orphans of the tree are children of
    root, the subreaper)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def end_tree() -> None:
    """SIGKILL everything below this launcher, again until nothing is left (a fork can race
    a pass), and reap what became ours."""
    me = os.getpid()
    for _ in range(200):
        pids = descendants(me) if os.path.isdir("/proc") else []
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap_ready()
        time.sleep(0.005)


_main: dict[str, int] = {}  # "pid" of the program; its wait "status" once reaped


def _reap_ready() -> None:
    with contextlib.suppress(ChildProcessError):
        while (reaped := os.waitpid(-1, os.WNOHANG))[0] > 0:
            _note(*reaped)


def _note(pid: int, status: int) -> None:
    if pid == _main.get("pid"):
        _main["status"] = status


def _child(args: argparse.Namespace, ruleset: int | None, launcher: int) -> None:
    """In the forked child: die with the launcher, confine, exec."""
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # it died before the line above took effect
            os._exit(1)
        if ruleset is not None:
            landlock.enforce(ruleset)
        env = dict(os.environ)
        if "JPY_PARENT_PID" in env:  # ipykernel watches its parent: now this launcher
            env["JPY_PARENT_PID"] = str(launcher)
        os.execvpe(args.program[0], args.program, env)
    except BaseException as exc:  # nothing may run on past this point
        print(f"oi-lsp sandbox: cannot start {args.program[0]}: {exc}", file=sys.stderr,
              flush=True)
        os._exit(127)


def _stop(signum: int, frame: object) -> None:
    end_tree()


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        ruleset = _ruleset(args)
    except (OSError, ValueError, KeyError) as exc:
        print(f"oi-lsp sandbox: refusing to start {args.program[0]}: {exc}", file=sys.stderr,
              flush=True)
        return REFUSED
    if args.follow_parent is not None:  # the server died: end the REPL and all it started
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    # The REPL's process group gets SIGINT to interrupt a run: that is the REPL's business.
    # A handler, not SIG_IGN, which the exec would pass on to the REPL.
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    if args.follow_parent is not None and os.getppid() != args.follow_parent:
        # The server died before the death signal was asked for (it never comes then): the
        # REPL would outlive it, nobody's. Exit as that signal would have made us.
        return 128 + signal.SIGTERM
    launcher = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(args, ruleset, launcher)
    _main["pid"] = pid
    if ruleset is not None:
        os.close(ruleset)
    status = _wait_for(pid)
    end_tree()
    return _exit_as(status)


def _wait_for(pid: int) -> int:
    """Reap children (orphans included) until `pid` ends; its wait status."""
    while "status" not in _main:
        try:
            _note(*os.waitpid(-1, 0))
        except ChildProcessError:
            break
    return _main.get("status", 0)


def _exit_as(status: int) -> int:
    """End as the program did: by the same signal, or with the same code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
