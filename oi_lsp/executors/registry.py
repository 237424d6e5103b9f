"""Which executor runs a language, and what this machine can run."""

from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..common.languages import ALIASES, LANGUAGES, Language
from ..protocol import LanguageInfo
from . import interpreter, kernelspecs, oneshot, repl
from .base import Executor
from .gateway.config import GatewayConfig
from .jupyter.local import KernelExecutor
from .sandbox.policy import Sandbox

log = logging.getLogger(__name__)

_installed: kernelspecs.TtlCache[str, dict[str, str]] = kernelspecs.TtlCache(
    kernelspecs.SPECS_TTL)


class UnknownLanguage(LookupError):
    """A language this machine cannot run; the message says what would make it work."""


def installed_kernels() -> dict[str, str]:
    """The kernelspecs installed here: canonical language -> kernel name."""
    return _installed.get("", _read_installed)


def _read_installed() -> dict[str, str]:
    return kernelspecs.by_language(kernelspecs.spec_manager().get_all_specs())


def kernel_program(kernel_name: str) -> str | None:
    """The program a local kernelspec starts (its argv[0]), when it is a Python kernel; None
    when there is no such kernelspec (blocking: reads the kernel folders)."""
    from jupyter_client.kernelspec import NoSuchKernel

    try:
        spec = kernelspecs.spec_manager().get_kernel_spec(kernel_name)
    except (NoSuchKernel, OSError, ValueError):
        return None
    if spec.language.strip().lower() not in ("python", "python3") or not spec.argv:
        return None
    program = str(spec.argv[0])
    # As jupyter_client starts it: a bare `python` is the interpreter running this server.
    major, minor = sys.version_info[:2]
    return sys.executable if program in ("python", f"python{major}",
                                         f"python{major}.{minor}") else program


def _program(lang: Language) -> str | None:
    return next((path for p in lang.programs if (path := shutil.which(p))), None)


def _available(name: str) -> bool:
    if name in installed_kernels():
        return True
    lang = LANGUAGES.get(name)
    if lang is None:
        return False
    return lang.kind in ("kernel", "display") or _program(lang) is not None


def canonical(language: str) -> str:
    key = language.strip().lower()
    name = ALIASES.get(key) or (key if key in installed_kernels() else None)
    if name is None:
        known = ", ".join(sorted(n for n in {*LANGUAGES, *installed_kernels()} if _available(n)))
        raise UnknownLanguage(f"cannot run {language!r} here: no such language is known; "
                              f"available: {known}")
    lang = LANGUAGES.get(name)
    if lang is not None and lang.fallback and not _available(name):
        return lang.fallback  # zsh/fish code runs in bash when that shell is not installed
    return name


def runnable() -> set[str]:
    """Every name (aliases included) that fenced code blocks may use to ask for a run."""
    names = {alias for alias, name in ALIASES.items() if _available(name)}
    return names | set(installed_kernels())


@dataclass(frozen=True, slots=True)
class ReplOptions:
    """What the settings decide about a workspace's REPLs."""

    kernel_name: str = "python3"  # the Python kernelspec
    keep_kernel: bool = False  # leave local kernels running for the next server
    pass_keys: bool = False  # local REPLs start with the server's key variables
    gateway: GatewayConfig | None = None  # run kernels on this Jupyter gateway
    sandbox: Sandbox = field(default_factory=Sandbox)  # what local REPLs may do
    python: interpreter.Interpreter = interpreter.OWN  # the local Python kernel's interpreter


def create(language: str, cwd: Path, options: ReplOptions) -> Executor:
    """A new, not yet started executor for the canonical `language`. With a kernel gateway,
    Python runs there, and so does any language the gateway has a kernel for."""
    lang = LANGUAGES.get(language)
    if options.gateway is not None and (lang is None or lang.kind != "display"):
        # lazy: httpx and websockets only for a workspace that uses a gateway
        from .gateway.executor import GatewayKernelExecutor
        from .gateway.routing import remote_or_local

        if language == "python":
            return GatewayKernelExecutor(language, options.kernel_name, cwd, options.gateway)
        routed = remote_or_local(language, cwd, options.gateway,
                                 lambda: _create_local(language, cwd, options))
        routed.sandbox = options.sandbox
        return routed
    return _create_local(language, cwd, options, keep=options.keep_kernel)


async def remote_kernels(options: ReplOptions) -> dict[str, str]:
    """The languages the workspace's kernel gateway has kernels for (language -> kernelspec);
    empty without a gateway, or when it cannot be asked now (logged)."""
    if options.gateway is None:
        return {}
    from .gateway.client import GatewayError, remote_kernelspecs

    try:
        return await remote_kernelspecs(options.gateway)
    except GatewayError as exc:
        log.warning("%s", exc)
        return {}


def _create_local(language: str, cwd: Path, options: ReplOptions,
                  keep: bool = False) -> Executor:
    executor = _local(language, cwd, options.kernel_name, keep, options.python)
    executor.pass_keys = options.pass_keys
    executor.sandbox = options.sandbox
    return executor


def _local(language: str, cwd: Path, kernel_name: str, keep: bool,
           python: interpreter.Interpreter) -> Executor:
    if language == "python":
        return KernelExecutor("python", kernel_name, cwd, keep=keep, python=python)
    kernel = installed_kernels().get(language)
    if kernel is not None:  # an installed kernel beats a subprocess REPL
        return KernelExecutor(language, kernel, cwd)
    lang = LANGUAGES.get(language)
    if lang is None:
        raise UnknownLanguage(f"cannot run {language!r} here")
    if lang.kind == "display":
        return oneshot.HtmlExecutor()
    program = _program(lang)
    if program is None:
        raise UnknownLanguage(f"cannot run {lang.name} here: {_missing(lang)}; "
                              f"{lang.install_hint}")
    if lang.name == "java":
        # `java File.java` compiles in memory and runs (JDK 11+); javac says a JDK is there.
        java = str(Path(program).with_name("java"))
        return oneshot.OneShotExecutor("java", lambda path: [java, str(path)], cwd,
                                       oneshot.java_source)
    if lang.name == "applescript":
        return oneshot.OneShotExecutor("applescript", lambda path: [program, str(path)], cwd)
    spec = {"javascript": repl.node_spec, "ruby": repl.ruby_spec, "r": repl.r_spec,
            "powershell": repl.pwsh_spec}.get(lang.name)
    return repl.ReplExecutor(spec(program) if spec else repl.shell_spec(lang.name, program), cwd)


def outside(language: str, cwd: Path) -> Executor:
    """A fresh, unconfined process of `language` for one run the user let out of the sandbox
    (the confined REPL cannot be lifted): it shares none of the REPL's state."""
    lang = LANGUAGES.get(language)
    program = sys.executable if language == "python" else (
        _program(lang) if lang is not None else None)
    if lang is None or program is None or lang.kind == "display":
        raise UnknownLanguage(f"cannot run {language!r} outside the sandbox here")
    if lang.name == "r":
        program = str(Path(program).with_name("Rscript"))
    elif lang.name == "java":
        program = str(Path(program).with_name("java"))
    flags = ["-File"] if lang.name == "powershell" else []
    return oneshot.OneShotExecutor(
        lang.name, lambda path: [program, *flags, str(path)], cwd,
        oneshot.java_source if lang.name == "java" else lambda code: code)


def _missing(lang: Language) -> str:
    return " or ".join(f"`{p}`" for p in lang.programs) + " is not on PATH"


def _info(lang: Language, kernel_name: str) -> LanguageInfo:
    kernel = kernel_name if lang.name == "python" else installed_kernels().get(lang.name)
    if kernel is not None:
        return LanguageInfo(name=lang.name, aliases=list(lang.aliases), kind="kernel",
                            runner=kernel, available=True)
    if lang.kind == "display":
        return LanguageInfo(name=lang.name, aliases=list(lang.aliases), kind="display",
                            runner="shown by the client", available=True)
    program = _program(lang)
    if program is None and lang.fallback:
        return LanguageInfo(name=lang.name, aliases=list(lang.aliases), kind=lang.kind,
                            runner=f"runs in {lang.fallback}: {_missing(lang)}",
                            available=True, install_hint=lang.install_hint)
    return LanguageInfo(name=lang.name, aliases=list(lang.aliases), kind=lang.kind,
                        runner=program or lang.programs[0], available=program is not None,
                        install_hint=None if program else lang.install_hint)


def describe(options: ReplOptions, remote: dict[str, str] | None = None) -> list[LanguageInfo]:
    """What runs each language; with a gateway, Python and the languages in `remote` (the
    gateway's kernels, from remote_kernels) say they run there, on its host."""
    infos = [_info(lang, options.kernel_name) for lang in LANGUAGES.values()]
    infos = [info.model_copy(update={"interpreter": options.python.describe()})
             if info.name == "python" else info for info in infos]
    infos += [LanguageInfo(name=name, aliases=[], kind="kernel", runner=kernel, available=True)
              for name, kernel in installed_kernels().items() if name not in LANGUAGES]
    sandbox = options.sandbox
    infos = [info if info.kind == "display" else info.model_copy(update={
        "sandbox": sandbox.mode, "sandbox_network": sandbox.network}) for info in infos]
    gateway = options.gateway
    if gateway is not None:
        runners = {**(remote or {}), "python": gateway.kernel_name or options.kernel_name}
        infos = [info.model_copy(update={
            "location": "remote", "host": gateway.host, "kind": "kernel",
            "runner": runners[info.name], "available": True, "install_hint": None,
            "sandbox": "gateway", "sandbox_network": None, "interpreter": None})
            if info.name in runners and info.kind != "display" else info for info in infos]
    return infos
