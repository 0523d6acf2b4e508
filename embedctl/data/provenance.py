"""Run info (resolved config, overrides, versions) beside a data command's output, local or URL.

Local folders get `embedctl.runinfo.write_run_info` directly. For fsspec URLs (s3://, memory://) the
three files are written to a local temporary folder and copied next to the output with fsspec.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from embedctl.data.formats import join, write_file
from embedctl.runinfo import write_run_info
from embedctl.util.fs import is_local, url_to_fs


def write_run_info_any(out_url: str, loaded, command: str) -> None:
    if is_local(out_url):
        write_run_info(out_url.removeprefix("file://"), loaded, command)
        return

    fs, path = url_to_fs(out_url)
    with tempfile.TemporaryDirectory(prefix="embedctl-runinfo-") as tmp:
        write_run_info(tmp, loaded, command)
        for f in sorted(Path(tmp).iterdir()):
            write_file(fs, join(path, f.name), f.read_bytes())
