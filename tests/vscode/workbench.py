"""Driving code-server's workbench from tests: the Workbench (driver.mjs over a pipe) and
small helpers the end-to-end scenarios share."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "clients" / "vscode"
ARTIFACTS = ROOT / "test-artifacts"


class Workbench:
    """code-server's workbench through driver.mjs (one JSON line per request and answer)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["node", str(Path(__file__).with_name("driver.mjs"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=EXT)
        self.next_id = 0

    def __call__(self, op: str, **params: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **params}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the driver exited during {op}"
        answer = json.loads(line)
        if not answer["ok"] and op != "screenshot":  # keep what the window showed
            self("screenshot", path=str(ARTIFACTS / "vscode-e2e-failure.png"))
        assert answer["ok"], f"{op} {params}: {answer['error']}"
        return answer["value"]

    def close(self) -> None:
        try:
            self("close")
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # Conveniences --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What the chat view shows (read inside its frame)."""
        return self("chatEval", expression="""(() => {
            const log = document.getElementById('oi-log');
            const all = (sel) => [...log.querySelectorAll(sel)];
            return {
                users: all('.oi-user').map((e) => e.textContent),
                assistantHtml: all('.oi-assistant').map((e) => e.innerHTML),
                codes: all('.oi-code').map((e) => ({
                    code: e.querySelector('.oi-source code')?.dataset.code ?? null,
                    note: e.querySelector('.oi-note')?.textContent ?? null,
                    output: e.querySelector('details.oi-output pre')?.textContent ?? null })),
                notices: all('.oi-notice, .oi-error').map((e) => e.textContent),
                scripts: log.querySelectorAll('script').length,
                handlers: [...log.querySelectorAll('*')].filter(
                    (e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
                pwned: window.__pwned ?? null,
                folder: document.getElementById('oi-folder').selectedOptions[0]?.textContent,
            };
        })()""")

    def shot(self, name: str) -> Path:
        path = ARTIFACTS / f"vscode-e2e-{name}.png"
        self("screenshot", path=str(path))
        return path

    def answer(self, button: str) -> None:
        self("chatWait", selector=".oi-actions button.oi-" + button)
        self("chatClick", selector=".oi-actions button.oi-" + button)

    def wait_output(self, text: str, timeout: int = 60000) -> None:
        self("chatWait", selector="details.oi-output pre", hasText=text, timeout=timeout)

    def edit_proposal(self, code: str) -> None:
        """Edit the waiting proposal in its editor tab and run it with the tab's Run edited."""
        self.answer("edit")
        self("wait", selector=".editor-actions .action-label[aria-label^='Run edited']")
        self("click", selector=".monaco-editor .view-lines")
        self("keys", keys=["Control+a", "Delete"])
        self("insertText", text=code)
        self("click", selector=".editor-actions .action-label[aria-label^='Run edited']")

    def wait_idle(self) -> None:
        self("chatWait", selector="#oi-status[hidden]", timeout=60000, state="attached")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def auth(headers: dict[str, str]) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == "authorization"), None)


def last_user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


# How many editor tabs are untitled documents (an Edit tab, Open in a new editor).
UNTITLED_TABS = ("[...document.querySelectorAll('.tab')]"
                 ".filter((t) => t.textContent.includes('Untitled')).length")
