"""The risk check's view of Python code, from its syntax tree (the standard library's ast).

Names are followed through imports and aliases (`from shutil import rmtree as r`), `getattr`
with a name it can compute ('rm' + 'tree'), `__import__` and `importlib.import_module`; the
commands given to os.system and subprocess are checked as shell commands. What is computed at
run time (a name from a variable, decoded text) cannot be read: code that runs or looks up
something that way is high risk for that reason alone.
"""

from __future__ import annotations

import ast

from . import risk_shell
from .risk_shell import Finding

# Qualified names and what they do (`from x import y` and `x.y` alike).
_TREE_DELETES = {"shutil.rmtree", "os.removedirs"}
_NAMES: dict[str, Finding] = {
    "shutil.rmtree": ("high", "deletes a directory tree"),
    "os.removedirs": ("high", "deletes a directory tree"),
    "os.remove": ("medium", "deletes files"),
    "os.unlink": ("medium", "deletes files"),
    "os.rmdir": ("medium", "deletes files"),
    "os.kill": ("medium", "kills processes"),
    "os.killpg": ("medium", "kills processes"),
    "ctypes.CDLL": ("medium", "loads native code (ctypes)"),
}
_SHELL_CALLS = {"os.system", "os.popen", "subprocess.run", "subprocess.call", "subprocess.Popen",
                "subprocess.check_call", "subprocess.check_output", "subprocess.getoutput",
                "subprocess.getstatusoutput", "pty.spawn", "os.execv", "os.execvp",
                "os.execl", "os.execlp", "os.execve", "os.execvpe", "os.spawnv", "os.spawnvp",
                "os.posix_spawn", "os.posix_spawnp", "commands.getoutput"}
_RUNNERS = {"exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile"}
_IMPORTERS = {"__import__", "importlib.import_module", "builtins.__import__"}
# Modules whose names, looked up at run time, could be anything dangerous.
_POWERFUL = {"os", "shutil", "subprocess", "builtins", "importlib", "sys", "ctypes", "pty",
             "socket", "pathlib", "__builtins__"}
_SENDERS = ("requests.", "httpx.", "urllib.request.", "urllib3.", "aiohttp.", "http.client.",
            "smtplib.", "ftplib.", "socket.", "paramiko.")
_SEND_WORDS = {"post", "put", "patch", "request", "urlopen", "Request", "send", "sendall",
               "sendfile", "sendmail", "send_message", "storbinary", "storlines", "upload",
               "put_object", "upload_file"}
# Of them, those that send whatever object they are called on (a socket, a session, a client);
# `put`, `request`... on an object of unknown kind are too common (`queue.put(...)`).
_SEND_METHODS = {"post", "urlopen", "sendall", "sendfile", "sendmail", "send_message",
                 "storbinary", "storlines", "upload_file", "put_object"}
_FILE_READS = {"open", "read_text", "read_bytes", "io.open", "codecs.open"}
# Expressions that stand for the home folder, as a shell word.
_HOME_CALLS = {"pathlib.Path.home", "Path.home", "os.path.expanduser", "expanduser",
               "os.getenv", "os.environ.get"}


class _Reader:
    """One pass over the tree's nodes, in ast.walk's order (a call before its parts): the
    imports and assignments first (a name may be used above its import), then the uses."""

    def __init__(self, nodes: list[ast.AST], loops: set[int]) -> None:
        self.aliases: dict[str, str] = {}
        self.found: list[Finding] = []
        self.loops = loops  # ids of calls inside a loop
        self.judged: set[int] = set()  # names of calls judged with their arguments
        self.temps: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in nodes:
            if isinstance(node, ast.Assign):
                self._assign(node)
            elif isinstance(node, ast.With | ast.AsyncWith):
                self.temps.update(item.optional_vars.id for item in node.items
                                  if isinstance(item.optional_vars, ast.Name)
                                  and self._temporary(item.context_expr))

    def _assign(self, node: ast.Assign) -> None:
        """Names for modules and functions (`m = __import__(x)`, `r = shutil.rmtree`), and
        for temporary folders (`d = tempfile.mkdtemp()`)."""
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if not names or not isinstance(node.value, ast.Attribute | ast.Call):
            return
        if self._temporary(node.value):
            self.temps.update(names)
        elif value := self.qualname(node.value):
            self.aliases.update(dict.fromkeys(names, value))

    def _temporary(self, node: ast.AST) -> bool:
        """`tempfile.mkdtemp()`, `tempfile.TemporaryDirectory().name`, `Path(tempfile...)`."""
        while isinstance(node, ast.Attribute | ast.Call):
            if isinstance(node, ast.Attribute):
                node = node.value
            elif (self.qualname(node.func) or "").startswith("tempfile."):
                return True
            elif len(node.args) == 1:
                node = node.args[0]
            else:
                return False
        return False

    def run(self, nodes: list[ast.AST]) -> list[Finding]:
        for node in nodes:
            if isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.Attribute) and id(node) not in self.judged:
                self._named(self.qualname(node))
            elif isinstance(node, ast.Name) and id(node) not in self.judged \
                    and node.id in self.aliases:
                self._named(self.aliases[node.id])
        return self.found

    # Names ---------------------------------------------------------------------------------

    def qualname(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            func = self.qualname(node.func)
            if func in _IMPORTERS and node.args:
                return constant(node.args[0])
            if func in ("getattr", "builtins.getattr") and len(node.args) >= 2:
                base, attr = self.qualname(node.args[0]), constant(node.args[1])
                return f"{base}.{attr}" if base and attr else None
        return None

    def _named(self, name: str | None) -> None:
        if name in _NAMES:
            self.found.append(_NAMES[name])

    # Calls ---------------------------------------------------------------------------------

    def call(self, node: ast.Call) -> None:
        name = self.qualname(node.func)
        self._named(self.qualname(node))  # getattr(shutil, 'rmtree'), __import__('x').y
        if name in _TREE_DELETES:
            self.judged.add(id(node.func))
            if not (node.args and self._scratch(node.args[0])):
                self._named(name)
        elif name in ("getattr", "builtins.getattr") and len(node.args) >= 2:
            if constant(node.args[1]) is None and self._powerful(node.args[0]):
                self.found.append(("high", "looks up a name at run time (getattr), so what "
                                   "it calls cannot be checked"))
        elif name in _IMPORTERS and (not node.args or constant(node.args[0]) is None):
            self.found.append(("high", "imports a module named at run time"))
        elif name in _RUNNERS and node.args and constant(node.args[0]) is None:
            self.found.append(("high", "runs code it builds or decodes at run time "
                               f"({name.rsplit('.', 1)[-1]})"))
        elif name in _SHELL_CALLS and node.args:
            self._shell(node.args[0])
        elif name in ("os.fork", "os.forkpty") and id(node) in self.loops:
            self.found.append(("high", "forks in a loop (a fork bomb)"))
        elif name and self._sends(name, node):
            self.found.append(("high", "sends a file's contents over the network"))

    def _scratch(self, node: ast.AST) -> bool:
        """A temporary folder, or a build or cache folder named relative to the workspace."""
        if isinstance(node, ast.Name):
            return node.id in self.temps
        if isinstance(node, ast.Call) and node.args and len(node.args) == 1 and \
                (self.qualname(node.func) or "").rsplit(".", 1)[-1] in ("Path", "PurePath"):
            node = node.args[0]
        text = constant(node)
        return text is not None and risk_shell.is_scratch(text)

    def _powerful(self, node: ast.AST) -> bool:
        base = self.qualname(node)
        return base is None or base.split(".")[0] in _POWERFUL

    def _shell(self, arg: ast.AST) -> None:
        text = constant(arg)
        if text is not None:
            self.found += risk_shell.check(text)
        elif isinstance(arg, ast.List | ast.Tuple):
            words = [constant(e) or self._home(e) or "?" for e in arg.elts]
            self.found += risk_shell.check_argv(risk_shell.argv(words))
        elif _built(arg):
            self.found.append(("high", "runs a command it builds or decodes at run time"))

    def _home(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Call) and self.qualname(node.func) in _HOME_CALLS:
            value = constant(node.args[0]) if node.args else "~"
            return "~" if value in ("~", "HOME", "~/") else None
        if isinstance(node, ast.Subscript) and constant(node.slice) == "HOME":
            return "~"
        return None

    def _sends(self, name: str, node: ast.Call) -> bool:
        word = name.rsplit(".", 1)[-1]
        if not ((name.startswith(_SENDERS) and word in _SEND_WORDS)
                or ("." in name and word in _SEND_METHODS)):
            return False
        for part in [*node.args, *(k.value for k in node.keywords)]:
            for sub in ast.walk(part):
                if isinstance(sub, ast.Call):
                    called = self.qualname(sub.func) or ""
                    if called in _FILE_READS or called.rsplit(".", 1)[-1] in _FILE_READS:
                        return True
        return any(k.arg == "files" for k in node.keywords) and name.startswith(_SENDERS)


def constant(node: ast.AST) -> str | None:
    """The string an expression always has, when it can be computed without running it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = constant(node.left), constant(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [constant(v) for v in node.values]
        return "".join(p for p in parts if p is not None) if None not in parts else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join" and len(node.args) == 1
            and isinstance(node.args[0], ast.List | ast.Tuple)):
        sep = constant(node.func.value)
        parts = [constant(e) for e in node.args[0].elts]
        return sep.join(p for p in parts if p is not None) \
            if sep is not None and None not in parts else None
    if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
            and node.slice.lower is node.slice.upper is None):  # 'eert' 'mr'[::-1]
        text = constant(node.value)
        step = node.slice.step
        if text is not None and isinstance(step, ast.UnaryOp) and constant_int(step) == -1:
            return text[::-1]
    return None


def constant_int(node: ast.AST) -> int | None:
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int)):
        return -node.operand.value
    return None


def _built(node: ast.AST) -> bool:
    """Whether an expression decodes or assembles text (chr, join, b64decode, fromhex...)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            word = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if word in ("chr", "join", "decode", "b64decode", "fromhex", "unhexlify",
                        "decompress", "bytes", "bytearray", "reversed", "rot13", "a85decode",
                        "b32decode", "b16decode", "urlsafe_b64decode", "format"):
                return True
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Slice) \
                and sub.slice.step is not None:
            return True
    return False


# Every finding above starts from one of these words in the text (a module, a function, a
# builtin that reaches one): code without any is not parsed, the check's main cost.
_NEEDLES = ("shutil", "remove", "unlink", "rmdir", "kill", "ctypes", "CDLL", "getattr",
            "__import__", "import_module", "builtins", "exec", "eval", "compile", "system",
            "popen", "subprocess", "spawn", "pty", "getoutput", "fork", "post", "put", "patch",
            "request", "Request", "urlopen", "send", "stor", "upload")


def check(code: str) -> list[Finding] | None:
    """What the Python code `code` does that needs caution; None when it is not Python."""
    if not any(needle in code for needle in _NEEDLES):
        return []
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes = list(ast.walk(tree))  # one walk: ast's is pure Python, the cost of this check
    loops: set[int] = set()
    if "fork" in code:
        loops = {id(sub) for node in nodes if isinstance(node, ast.While | ast.For)
                 for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    return _Reader(nodes, loops).run(nodes)
