"""A real `jupyter kernelgateway` on 127.0.0.1 with a token, for the tests and the benchmark."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "gw-secret-4f9c2e"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    """A `jupyter kernelgateway` process in its own folder and process group."""

    def __init__(self, root: Path, token: str = TOKEN, bash: bool = False) -> None:
        self.root = root
        self.token = token
        self.bash = bash  # also offer bash_kernel (its kernelspec in a folder of its own)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        root.mkdir(parents=True, exist_ok=True)

    def start(self) -> Gateway:
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.root / "runtime"),
               "JUPYTER_DATA_DIR": str(self.root / "data"),
               "JUPYTER_CONFIG_DIR": str(self.root / "config")}
        if self.bash:  # installed for this gateway only: local runs never see it
            prefix = self.root / "prefix"
            subprocess.run([sys.executable, "-m", "bash_kernel.install", "--prefix", str(prefix)],
                           check=True, capture_output=True, timeout=120)
            env["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
        log = open(self.root / "gateway.log", "ab")  # the child keeps its own copy
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1",
             f"--KernelGatewayApp.port={self.port}",
             f"--KernelGatewayApp.auth_token={self.token}",
             "--JupyterWebsocketPersonality.list_kernels=True"],  # for the tests' checks
            cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True)  # its kernels share its group: kill() takes them all
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.root / "gateway.log").read_text()
            try:
                if httpx.get(f"{self.url}/api/kernelspecs", headers=self.auth(),
                             timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the kernel gateway did not start")

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def kernels(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/kernels", headers=self.auth(), timeout=10)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def kill(self) -> None:
        """A crash: the gateway and its kernels, at once."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def settings(self, **extra: Any) -> dict[str, Any]:
        return {"kernelGateway": {"url": self.url, "token": self.token, **extra}}
