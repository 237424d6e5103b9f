"""Where a kernel gateway is and how to talk to it (the `kernelGateway` setting, as the
executors take it). Light: the registry reads it without loading the gateway client."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

TOKEN_ENV = "OI_KERNEL_GATEWAY_TOKEN"


@dataclass(frozen=True)
class GatewayConfig:
    """Where the gateway is and how to talk to it (the `kernelGateway` setting)."""

    url: str
    token: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    validate_cert: bool = True
    kernel_name: str | None = None
    request_timeout: float = 30.0
    keep_kernel: bool = False

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc or self.url

    def http_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        token = self.token or os.environ.get(TOKEN_ENV)
        if token:
            headers["Authorization"] = f"token {token}"
        return headers

    def ws_url(self, path: str) -> str:
        parts = urlsplit(self.url.rstrip("/") + path)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urlunsplit((scheme, parts.netloc, parts.path, parts.query, ""))
