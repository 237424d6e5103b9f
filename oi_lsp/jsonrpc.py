"""pygls wire plumbing shared by the server and the client."""

from __future__ import annotations

from typing import Any

import cattrs
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)


def _keep(obj: dict[str, Any], cls: type[Any]) -> Any:
    return cls(**obj)


def raw_params_converter() -> cattrs.Converter:
    """Keep params and results of custom methods as plain JSON, for pydantic to validate.

    pygls' default turns them into namedtuples, which renames or drops some keys.
    """
    converter = default_converter()
    for cls in (JsonRPCRequestMessage, JsonRPCNotification, JsonRPCResponseMessage):
        converter.register_structure_hook(cls, _keep)
    return converter
