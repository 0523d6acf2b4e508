"""The one progress helper off a terminal: a slow rate as seconds per item, the time left, one final line."""

from __future__ import annotations

import io

from embedctl.util.progress import Progress, format_duration, format_rate


def test_slow_rate_reads_as_seconds_per_step():
    assert format_rate(0.02, "steps") == "50.0 s/step"
    assert format_rate(12.5, "docs") == "12.5 docs/s"
    assert format_rate(0.0, "steps") == "- steps/s"
    assert format_rate(1e-4, "steps") == "10,000.0 s/step"


def test_durations():
    assert format_duration(42) == "42 s"
    assert format_duration(185) == "3 min 05 s"
    assert format_duration(7620) == "2 h 07 min"


def test_plain_lines_have_eta_and_one_final_line():
    out = io.StringIO()  # not a terminal: plain lines
    with Progress(3, "train", unit="steps", stream=out, plain_every_s=0.0) as bar:
        for _ in range(3):
            bar.advance(1, info="loss 0.5")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines  # a line per step (interval 0) and no repeated last line
    assert lines[0].startswith("train: 1/3 steps (") and " left)" in lines[0]
    assert lines[-1].startswith("train: 3/3 steps (") and "left" not in lines[-1]
    assert sum(line.startswith("train: 3/3") for line in lines) == 1


def test_final_line_printed_when_interval_not_reached():
    out = io.StringIO()
    with Progress(5, "encoding", unit="docs", stream=out, plain_every_s=1000.0) as bar:
        bar.advance(5)
    assert out.getvalue().splitlines() == [line for line in out.getvalue().splitlines() if line.startswith("encoding: 5/5")]
    assert len(out.getvalue().splitlines()) == 1
