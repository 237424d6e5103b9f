"""Landlock (Linux 5.13+) through its three system calls, with ctypes.

Why not a PyPI package: `landlock` has only development releases and covers the file system
alone (no TCP rules, no scoping); `py-landlock` and `landlockpy` are recent single-author
releases. The kernel interface is three syscalls and three structs, stable by design (each
ABI only adds bits), so the whole of what we need fits below. Standard library only: the
launcher imports it before anything else starts.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from dataclasses import dataclass

# The same numbers on every architecture (syscalls added after the tables were unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# File system rights, by the ABI that brought them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_V1 = (1 << 13) - 1  # execute ... make_sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a file rule may hold
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class Unavailable(OSError):
    """A rule that was asked for cannot be enforced here; the message says which and why."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(number: int, *args: object) -> int:
    result = int(_libc().syscall(number, *args))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def abi() -> int:
    """The Landlock ABI version of the running kernel; 0 where there is none (not Linux, an
    older kernel, or Landlock not enabled at boot)."""
    if not os.uname().sysname == "Linux":
        return 0
    try:
        return _call(_CREATE_RULESET, None, ctypes.c_size_t(0),
                     ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def fs_rights(version: int) -> int:
    """Every file system right the ABI knows: all are handled, so none is left open."""
    rights = _FS_V1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


@dataclass(frozen=True, slots=True)
class Rules:
    """What the confined process may do: read (and run) everything, write beneath `write`
    (directories) and to `write_files` (device files such as /dev/null); with `network`
    False, no TCP bind or connect but binds to `bind_ports`; `scoped`: no signals to, nor
    abstract socket connects with, processes outside."""

    write: tuple[str, ...] = ()
    write_files: tuple[str, ...] = ()
    network: bool = True
    bind_ports: tuple[int, ...] = ()
    scoped: bool = True
    fs: bool = True  # False: the file system is left open (only the network is confined)


def check(rules: Rules, version: int | None = None) -> int:
    """The ABI, when it can enforce `rules`; else raise Unavailable saying what is missing."""
    version = abi() if version is None else version
    if version < 1:
        raise Unavailable(0, "the OS sandbox needs Landlock (Linux 5.13 or later, enabled at "
                             "boot: lsm=...,landlock), and this kernel has none")
    if not rules.network and version < 4:
        raise Unavailable(0, f"sandboxNetwork false needs Landlock ABI 4 (Linux 6.7); this "
                             f"kernel has ABI {version}")
    return version


def ruleset(rules: Rules) -> int:
    """A ruleset fd holding `rules` (raises Unavailable when they cannot be enforced). Built
    before the fork, so a failure is told before anything starts."""
    version = check(rules)
    handled = fs_rights(version) if rules.fs else 0
    net = 0 if rules.network else BIND_TCP | CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if rules.scoped and version >= 6 else 0
    attr = _RulesetAttr(handled, net, scoped)
    size = 8 if version < 4 else 16 if version < 6 else 24  # the struct as that ABI knows it
    fd = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        if handled:
            read = EXECUTE | READ_FILE | READ_DIR | (IOCTL_DEV if version >= 5 else 0)
            _allow_path(fd, "/", read)
            for path in rules.write:
                _allow_path(fd, path, handled)
            for path in rules.write_files:
                _allow_path(fd, path, handled & _FILE_RIGHTS, missing_ok=True)
        for port in rules.bind_ports if not rules.network else ():
            rule = _NetPort(BIND_TCP, port)
            _call(_ADD_RULE, fd, _RULE_NET_PORT, ctypes.byref(rule), ctypes.c_uint32(0))
    except OSError as exc:
        os.close(fd)
        raise Unavailable(exc.errno or 0, f"could not build the sandbox's rules: {exc}") from exc
    return fd


def _allow_path(fd: int, path: str, access: int, missing_ok: bool = False) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        rule = _PathBeneath(access, target)
        _call(_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(target)


def enforce(fd: int) -> None:
    """Confine this process, and all it will start, to the ruleset `fd`; for good."""
    prctl(_PR_SET_NO_NEW_PRIVS, 1)  # required by restrict_self; setuid programs stay plain
    _call(_RESTRICT_SELF, fd, ctypes.c_uint32(0))
    os.close(fd)


def prctl(option: int, value: int) -> None:
    if _libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def describe(version: int, network: bool) -> str:
    """What the kernel enforces, in words, for status lines."""
    parts = [f"Landlock ABI {version}"]
    if version < 6:
        parts.append("signals not scoped (ABI < 6)")
    return ", ".join(parts) + ("" if network else ", no TCP")


def paths(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(os.path.realpath(p) for p in items))
