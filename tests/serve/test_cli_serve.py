"""`embedctl serve` refuses bad settings before it listens: exit code, the problem and the fix."""

from __future__ import annotations

import socket


def test_a_missing_index_fails_with_the_fix(cli, tmp_path):
    result = cli("serve", "--index", str(tmp_path / "nope"), "--port", "0")
    assert result.exit_code != 0 and "nope" in result.output and "how to fix" in result.output


def test_bad_serve_settings_exit_2_naming_the_key(cli, tmp_path):
    result = cli("serve", "--index", str(tmp_path), "serve.port=70000")
    assert result.exit_code == 2 and "serve.port" in result.output
    result = cli("serve", "--index", str(tmp_path), "serve.api_keys=[short]")
    assert result.exit_code == 2 and "serve.api_keys" in result.output and "at least 16 characters" in result.output
    for setting in ("serve.batch_window_ms=-1", "serve.batch_window_max_ms=5000", "serve.search_queue=0"):
        result = cli("serve", "--index", str(tmp_path), setting)
        key = setting.split("=")[0]
        assert result.exit_code == 2 and key in result.output, (setting, result.output)


def test_a_port_in_use_exits_2_naming_the_flag(cli, tiny):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        result = cli("serve", "--index", str(tiny("dense")), "--port", str(taken.getsockname()[1]))
    finally:
        taken.close()
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1" in result.output and "--port" in result.output
