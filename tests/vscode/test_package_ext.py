"""The extension as published: `vsce package` prints no warning, and the .vsix carries its
README (with its screenshots), LICENSE and CHANGELOG; settings are described for people."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from tests.vscode.workbench import EXT

pytestmark = pytest.mark.timeout(1800)  # the first test may install the stack


def test_vsce_package_prints_no_warning(vsix: Path) -> None:
    out = vsix  # packaged once per run, for the end-to-end tests too
    output = vsix.with_suffix(".txt").read_text()
    assert "WARNING" not in output and "ERROR" not in output, output
    names = {n.lower() for n in zipfile.ZipFile(out).namelist()}
    assert {"extension/readme.md", "extension/changelog.md", "extension/license.txt"} <= names


def test_readme_images_exist_and_settings_read_well() -> None:
    readme = (EXT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert images and all((EXT / i).is_file() for i in images), images
    manifest = json.loads((EXT / "package.json").read_text())
    assert "Other" not in manifest["categories"]
    sections = manifest["contributes"]["configuration"]
    # Sections whose ids start with the settings' own prefix: the Settings editor then drops
    # the "Oi:" it would put before each setting (it reads "Api Base" under Open Interpreter).
    assert [c["title"] for c in sections] == ["Model", "Running code", "Server"]
    properties = {k: v for c in sections for k, v in c["properties"].items()}
    assert all(c["id"].startswith("oi.") for c in sections)
    assert all(k.startswith("oi.") for k in properties) and len(properties) >= 9
    for key, prop in properties.items():
        text = prop.get("markdownDescription") or prop.get("description") or ""
        assert len(text) > 20 and text[0].isupper() and text.rstrip().endswith("."), key
