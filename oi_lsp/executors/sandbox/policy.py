"""What a REPL may do (settings `sandbox` and `sandboxNetwork`), and the command line and
environment that make it so: every local REPL and kernel starts through launch.py."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import landlock

log = logging.getLogger(__name__)

Mode = Literal["off", "workspace-write", "read-only"]
MODES: tuple[Mode, ...] = ("off", "workspace-write", "read-only")

# Device files any program writes to; and /dev/shm, where POSIX semaphores and shared memory
# live (multiprocessing, joblib): a tmpfs, allowed (docs/reliability.md says so).
WRITE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random",
               "/dev/urandom")
SHARED_MEMORY = "/dev/shm"


class SandboxUnavailable(RuntimeError):
    """The sandbox asked for cannot be enforced here: the REPL is not started."""


@functools.cache
def _abi() -> int:
    return landlock.abi()


@dataclass(frozen=True, slots=True)
class Sandbox:
    mode: Mode = "off"
    network: bool = True

    @property
    def confined(self) -> bool:
        return self.mode != "off" or not self.network

    def check(self) -> str:
        """How it is enforced here, in words; raises SandboxUnavailable when it cannot be."""
        if not self.confined:
            return "off"
        if sys.platform.startswith("linux"):
            try:
                version = landlock.check(self._rules(Path("/"), Path("/")), _abi())
            except landlock.Unavailable as exc:
                raise SandboxUnavailable(f"sandbox {self.mode!r} cannot be enforced: "
                                         f"{exc.strerror}") from None
            if version < 6:
                log.warning("sandbox %s without scoping: Landlock ABI %s cannot keep its code "
                            "from signalling processes outside it (ABI 6, Linux 6.12)",
                            self.mode, version)
            return landlock.describe(version, self.network)
        if sys.platform == "darwin":
            return "sandbox-exec (untested)"
        raise SandboxUnavailable(f"sandbox {self.mode!r} is not supported on {sys.platform}; "
                                 f"set sandbox to 'off' to run code here unconfined")

    def _writable(self, workspace: Path, private: Path) -> tuple[str, ...]:
        if self.mode == "off":
            return ()
        dirs = [str(private), SHARED_MEMORY]
        if self.mode == "workspace-write":
            dirs.insert(0, str(workspace))
        return tuple(d for d in dirs if os.path.isdir(d))

    def _rules(self, workspace: Path, private: Path) -> landlock.Rules:
        return landlock.Rules(write=self._writable(workspace, private),
                              write_files=WRITE_FILES, network=self.network,
                              fs=self.mode != "off")

    def command(self, program: Sequence[str], workspace: Path, private: Path, *,
                follow_parent: bool = True, ports_from: str | None = None,
                write_files: Sequence[str] = ()) -> list[str]:
        """`program` started through the launcher (confined as this sandbox says; it may also
        write `write_files`, e.g. its terminal). Raises SandboxUnavailable when it cannot be
        confined so."""
        self.check()
        if sys.platform == "win32":
            return list(program)  # no fork: started as is (and only when not confined)
        argv = [sys.executable, "-m", "oi_lsp.executors.sandbox.launch"]
        if follow_parent:
            argv += ["--follow-parent", str(os.getpid())]
        if self.confined and sys.platform == "darwin":
            program = ["/usr/bin/sandbox-exec", "-p", self.profile(workspace, private),
                       *program]
        elif self.confined:
            argv.append("--confine")
            if self.mode == "off":
                argv.append("--any-write")
            for path in self._writable(workspace, private):
                argv += ["--write", path]
            for path in (*WRITE_FILES, *write_files):
                argv += ["--write-file", path]
            if not self.network:
                argv.append("--no-network")
                if ports_from is not None:
                    argv += ["--bind-ports-from", ports_from]
        return [*argv, "--", *program]

    def environ(self, private: Path) -> dict[str, str]:
        """Where programs put their temporary files, caches and state: the private folder,
        when they could not write to the usual places."""
        if self.mode == "off":
            return {}
        temp = str(private)
        return {"TMPDIR": temp, "TMP": temp, "TEMP": temp,
                "IPYTHONDIR": str(private / "ipython"),
                "MPLCONFIGDIR": str(private / "matplotlib"),
                "XDG_CACHE_HOME": str(private / "cache"),
                "npm_config_cache": str(private / "npm")}

    def profile(self, workspace: Path, private: Path) -> str:
        """A sandbox-exec (Seatbelt) profile of this sandbox: macOS. Untested."""
        rules = ["(version 1)", "(allow default)"]
        if self.mode != "off":
            allowed = " ".join(f'(subpath "{_sb(p)}")' for p in
                               self._writable(workspace, private))
            files = " ".join(f'(literal "{p}")' for p in WRITE_FILES)
            rules += ["(deny file-write*)", f"(allow file-write* {allowed} {files})"]
        if not self.network:
            rules += ["(deny network-outbound (remote ip))", "(deny network-bind (local ip))",
                      '(allow network-bind (local ip "localhost:*"))']
        return "\n".join(rules)

    def describe(self) -> str:
        if self.mode == "off":
            return "off" if self.network else "off, no network"
        return self.mode + ("" if self.network else ", no network")


def _sb(path: str) -> str:
    return os.path.realpath(path).replace("\\", "\\\\").replace('"', '\\"')


def private_dir(base: Path) -> Path:
    """The REPL's private temporary folder under `base` (its executor's own folder, where its
    run files are, which the REPL itself may not write to)."""
    path = base / "tmp"
    path.mkdir(mode=0o700, exist_ok=True)
    return path
