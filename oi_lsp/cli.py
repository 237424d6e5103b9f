"""Command line: `oi-lsp` relays LSP over stdio to the user's daemon (`oi-lsp daemon`, started
when none runs); `--standalone` (or $OI_LSP_STANDALONE=1) serves in this process, over stdio or
--tcp / --ws on 127.0.0.1; `oi-lsp chat` is the terminal client."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import __version__
from .common import httpx_compat


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oi-lsp", allow_abbrev=False,  # `--token` must not pass for --token-file
        description="Open Interpreter as a language server: a model proposes code, you approve "
                    "it, it runs in a persistent REPL of your workspace. An editor starts "
                    "`oi-lsp` and talks LSP over stdio.")
    parser.add_argument("--version", action="version", version=f"oi-lsp {__version__}")
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="serve over stdio (default)")
    parser.add_argument("--standalone", action="store_true",
                        help="serve in this process instead of relaying to the user's shared "
                        "daemon (also $OI_LSP_STANDALONE=1; --tcp/--ws always are)")
    transport.add_argument("--tcp", action="store_true", help="serve over TCP")
    transport.add_argument("--ws", action="store_true", help="serve over WebSocket")
    parser.add_argument("--host", default="127.0.0.1", help="address for --tcp/--ws")
    parser.add_argument("--port", type=int, default=2087, help="port for --tcp/--ws")
    parser.add_argument("--token", help=argparse.SUPPRESS)  # refused with a pointer, below
    parser.add_argument("--token-file", metavar="PATH",
                        help="a file whose first line is the token --tcp/--ws clients must send "
                        "in initializationOptions.token (else $OI_LSP_TOKEN, else a random one "
                        "printed to stderr); never on the command line, where `ps` shows it")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow --host to be an address other than loopback (anyone who "
                        "reaches it and has the token can run code here)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="--ws: also accept connections from this web page origin (e.g. "
                        "http://localhost:3000, repeatable); connections with any other Origin "
                        "header are refused, so a page in the user's browser cannot connect")
    parser.add_argument("--log-level", default="warning",
                        choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-file", help="write the log here instead of stderr")
    commands = parser.add_subparsers(dest="command", metavar="{chat,acp,trust,daemon}")
    chat = commands.add_parser(
        "chat", help="chat in this terminal (through the user's shared daemon)",
        description="Talk to the model in this terminal: it proposes code, you approve it, "
                    "it runs in the persistent REPL of the workspace folder. It starts `oi-lsp` "
                    "over stdio, exactly as an editor does: through the user's shared daemon, "
                    "so an editor open on the folder shows the same conversation, live.")
    from .tui.args import add_arguments  # not the client itself: the server never runs it

    add_arguments(chat)
    commands.add_parser(
        "acp", help="serve the Agent Client Protocol over stdio (Zed, JetBrains, ...)",
        description="An ACP agent over stdio on the same core: sessions are workspace "
                    "conversations; settings come from the environment (OI_MODEL, ...) and "
                    "profiles.")
    trust = commands.add_parser(
        "trust", help="let a folder's .oi/profile.yaml change your settings (as direnv allow)",
        description="A workspace's .oi/profile.yaml applies only once you trust the folder with "
                    "that content (editors and `oi-lsp chat` ask; VS Code uses Workspace "
                    "Trust). This trusts the folder's profile as it is now; editing it asks "
                    "again.")
    trust.add_argument("folder", nargs="?", default=".", help="the workspace folder "
                       "(default: here)")
    trust.add_argument("--revoke", action="store_true", help="trust it no longer")
    add_daemon_parser(commands)
    return parser


def add_daemon_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    daemon = commands.add_parser(
        "daemon", help="the per-user server every editor's `oi-lsp` relays to",
        description="Serve every editor and terminal of this user from one process, on a Unix "
                    "socket in $XDG_RUNTIME_DIR/oi-lsp (else the data folder); `oi-lsp` starts "
                    "it when none runs.")
    action = daemon.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="say whether it runs, and what")
    action.add_argument("--stop", action="store_true", help="stop it (its REPLs end)")
    daemon.add_argument("--idle", type=float, metavar="SECONDS",
                        help="exit after this long without a connection (default "
                        "$OI_LSP_DAEMON_IDLE, else 1800)")
    daemon.add_argument("--grace", type=float, metavar="SECONDS",
                        help="keep an unused workspace's REPLs this long (default "
                        "$OI_LSP_KERNEL_GRACE, else 600)")


def relay_wanted(argv: list[str]) -> bool:
    """Plain `oi-lsp` (or with --stdio): what editors start, relayed to the daemon."""
    return (all(a == "--stdio" for a in argv)
            and os.environ.get("OI_LSP_STANDALONE", "") in ("", "0"))


def main(argv: list[str] | None = None) -> None:
    if relay_wanted(sys.argv[1:] if argv is None else argv):
        from .daemon.relay import main as relay  # before the parser: it imports pydantic

        sys.exit(relay())
    httpx_compat.skip_cli()  # before litellm or the gateway client imports httpx
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token is not None:
        parser.error("--token is not accepted: `ps` would show the token to every user of this "
                     "machine; pass --token-file PATH or set $OI_LSP_TOKEN")
    if args.command == "trust":
        sys.exit(trust_folder(args.folder, args.revoke))
    if args.command == "chat":
        from .tui.app import main as chat_main

        sys.exit(chat_main(args))
    if args.command == "daemon" and (args.status or args.stop):
        from .daemon import control

        sys.exit(control.stop() if args.stop else control.status())
    setup_logging(args.log_level, args.log_file)
    if args.command == "daemon":
        sys.exit(serve_daemon(args))
    if args.command == "acp":
        import asyncio

        from .acp.agent import serve as serve_acp  # the ACP SDK only for this command

        code = asyncio.run(serve_acp())
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    try:
        code = serve(args)
    except SystemExit as exc:  # `exit`: 0 after a `shutdown` request, 1 without one
        if isinstance(exc.code, str):  # a refusal to start, said as Python would at exit
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    # Everything is stopped by now; skip the interpreter's teardown, which with litellm loaded
    # spends about 2 s of CPU freeing modules while the editor waits for us to exit.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def trust_folder(name: str, revoke: bool) -> int:
    """`oi-lsp trust`: record (or forget) the folder's settings files as the user's."""
    from pathlib import Path

    from .core import profiles, trust

    folder = Path(name).expanduser().resolve()
    if not folder.is_dir():
        print(f"oi-lsp trust: {folder} is not a folder", file=sys.stderr)
        return 2
    if revoke:
        done = trust.revoke(folder)
        print(f"oi-lsp: {folder} " + ("is no longer trusted" if done else "was not trusted"))
        return 0
    files = trust.read(folder)
    trust.allow(folder, files.digest)
    if files.profile is None:
        print(f"oi-lsp: trusted {folder}; it has no {trust.WORKSPACE_PROFILE} (one added later "
              "is asked about)")
        return 0
    try:
        wants = "; ".join(profiles.wanted_changes(
            profiles.parse(files.profile, folder / trust.WORKSPACE_PROFILE))) or "nothing"
    except profiles.ProfileError as exc:
        wants = f"nothing yet: {exc}"
    print(f"oi-lsp: trusted {folder}: its {trust.WORKSPACE_PROFILE} may change {wants}")
    return 0


def setup_logging(level: str, path: str | None) -> None:
    handler: logging.Handler = (logging.FileHandler(path) if path
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # pygls logs whole messages at INFO, initialize's settings (and so an API key) among them.
    logging.getLogger("pygls").setLevel(logging.WARNING)


def serve(args: argparse.Namespace) -> int:
    """Serve; the exit status. Over stdio: 0 when the client asked for `shutdown` first, 1 when
    its stream ended without one (it went away, or sent what cannot be read on from)."""
    from .lsp.server import SERVER

    try:
        if args.tcp or args.ws:
            from .lsp import network

            network.gate_of(SERVER).token = network_token(args)
            if args.tcp:
                network.serve_tcp(SERVER, args.host, args.port)
            else:
                network.serve_ws(SERVER, args.host, args.port, args.allow_origin)
        else:
            from .common.pipes import private_stdio
            from .lsp.stdio import serve_stdio

            lsp_in, lsp_out = private_stdio()
            serve_stdio(SERVER, lsp_in, lsp_out)
            return 0 if SERVER.shut_down else 1
    finally:
        SERVER.workspaces.kill_all()  # the client may have vanished without a shutdown
    return 0


def serve_daemon(args: argparse.Namespace) -> int:
    from .daemon import server

    def seconds(given: float | None, var: str, default: float) -> float:
        return given if given is not None else float(os.environ.get(var) or default)

    code = server.serve(seconds(args.idle, "OI_LSP_DAEMON_IDLE", server.IDLE),
                        seconds(args.grace, "OI_LSP_KERNEL_GRACE", server.GRACE))
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def network_token(args: argparse.Namespace) -> str:
    """Check the bind address and return the token clients must present."""
    from .lsp.network import new_token

    if not _is_loopback(args.host):
        if not args.allow_remote:
            sys.exit(f"oi-lsp: refusing to listen on {args.host}: it is not a loopback "
                     "address; pass --allow-remote to do it anyway")
        logging.getLogger(__name__).warning(
            "listening on %s: anyone who can reach it and has the token can run code on "
            "this machine", args.host)
    token = _read_token(args.token_file) if args.token_file else os.environ.get("OI_LSP_TOKEN")
    if not token:
        token = new_token()
        print(f"oi-lsp token: {token}", file=sys.stderr, flush=True)
    return str(token)


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.readline().strip()
    except OSError as exc:
        sys.exit(f"oi-lsp: cannot read the token file {path}: {exc.strerror or exc}")
    if not token:
        sys.exit(f"oi-lsp: the token file {path} is empty")
    return token


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


if __name__ == "__main__":
    main()
