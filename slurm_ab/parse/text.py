"""Line and block readers plus timestamp helpers shared by all parsers.

Logs are read as bytes and decoded leniently: a log may hold binary garbage or a line cut by a
dying process, and one bad byte must never cost the rest of the file.
"""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Iterator

BLOCK = 1 << 22          # 4 MiB reads: large enough for C-speed scanning, small enough for flat RSS
MAX_LINE = 1 << 20       # longer "lines" (binary garbage, tqdm \r storms) are cut into pieces

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_TS = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?")
_BRACKET_TS = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)")
_RAY_PREFIX = re.compile(r"\(\w+ pid=\d+(?:,\s*ip=[\d.:a-fA-F]+)?\)\s*")


def strip_ansi(text: str) -> str:
    """Remove terminal colour/cursor sequences (cheap no-op when there is no ESC)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def decode(raw: bytes) -> str:
    """Bytes -> clean text line: lenient UTF-8, no ANSI codes, no line terminator."""
    return strip_ansi(raw.decode("utf-8", "replace")).rstrip("\r\n")


def iter_lines(path: str | Path, *, max_line: int = MAX_LINE) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, clean text) for every line of a file.

    Memory is bounded by max_line: an over-long line is yielded in pieces that share its number.
    """
    with open(path, "rb", buffering=1 << 20) as f:
        readline = f.readline
        lineno = 1
        while True:
            raw = readline(max_line)
            if not raw:
                return
            yield lineno, decode(raw)
            if raw.endswith(b"\n"):
                lineno += 1


def iter_blocks(path: str | Path, size: int = BLOCK) -> Iterator[tuple[bytes, int, int]]:
    """Yield (buffer, start, end): buffer[start:end] is a run of complete lines.

    Bounds instead of slices avoid copying each 4 MiB block; only a line that straddles two
    reads is copied (into a small stitch buffer). The final piece may lack a newline (a truncated
    last line); a line longer than max(size, MAX_LINE) is yielded in pieces.
    """
    limit = max(size, MAX_LINE)
    with open(path, "rb", buffering=0) as f:
        rest = b""
        while True:
            buf = f.read(size)
            if not buf:
                if rest:
                    yield rest, 0, len(rest)
                return
            first = buf.find(b"\n")
            if first < 0:                      # no newline in a whole block
                rest += buf
                if len(rest) >= limit:
                    yield rest, 0, len(rest)
                    rest = b""
                continue
            start = 0
            if rest:
                stitch = rest + buf[: first + 1]
                yield stitch, 0, len(stitch)
                start = first + 1
            last = buf.rfind(b"\n") + 1
            if last > start:
                yield buf, start, last
            rest = buf[last:]


def scalar(text: str) -> object:
    """A printed value as int, float or bool when it is one, else the stripped text."""
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_ts(text: str) -> datetime | None:
    """'YYYY-mm-dd HH:MM:SS[.fff]' (also 'T' and ',' variants) -> naive datetime, else None."""
    m = _TS.match(text)
    if not m:
        return None
    frac = m.group(3)
    try:
        ts = datetime.fromisoformat(f"{m.group(1)} {m.group(2)}")
    except ValueError:
        return None
    if frac:
        ts = ts.replace(microsecond=int(frac[:6].ljust(6, "0")))
    return ts


def line_timestamp(line: str) -> datetime | None:
    """Timestamp of a log line: SGLang's '[date time ...]' prefix, a leading 'date time' (Python
    logging's asctime, router logs), either one after a Ray '(Actor pid=N)' prefix.

    Router logs print UTC with a 'Z'; the zone is ignored (all windows use machine-local time).
    """
    return line_stamp(line)[0]


def line_stamp(line: str) -> tuple[datetime | None, bool]:
    """(line_timestamp, whether the stamp carries sub-second digits)."""
    line = strip_ansi(line)
    m = _BRACKET_TS.search(line, 0, 200)
    if m:
        return parse_ts(m.group(1)), has_fraction(m.group(1))
    line = line.lstrip()
    if line.startswith("("):
        m = _RAY_PREFIX.match(line)
        if m:
            line = line[m.end():]
    m = _TS.match(line, 0, 40)
    return (parse_ts(m.group(0)), m.group(3) is not None) if m else (None, False)


def stamp_in(head: str) -> tuple[datetime | None, bool, int, int]:
    """The first 'YYYY-mm-dd HH:MM:SS[.,fff]' in a line's head: (time, has fraction, start, end).

    Every layout SGLang has printed puts the stamp before the message: its own
    '[%(asctime)s{.msecs}{ranks}]' (datefmt '%Y-%m-%d %H:%M:%S'; '.fff' with SGLANG_LOG_MS), a
    logging config of the user's (SGLANG_LOGGING_CONFIG_PATH: asctime anywhere, Python's default
    'YYYY-mm-dd HH:MM:SS,fff'), behind Ray's '(Actor pid=N, ip=..)'. (None, False, -1, -1) when
    there is none, e.g. sglang's diffusion runtime's year-less '%m-%d %H:%M:%S'.
    """
    m = _TS.search(head)
    if m is None:
        return None, False, -1, -1
    return parse_ts(m.group(0)), m.group(3) is not None, m.start(), m.end()


def has_fraction(ts_text: str) -> bool:
    """True if a timestamp text carries sub-second digits (SGLANG_LOG_MS)."""
    return len(ts_text) > 19 and ts_text[19] in ".,"


def in_window(ts: datetime, start: datetime | None, end: datetime | None, *,
              whole_seconds: bool) -> bool:
    """Window test honouring the stamp's precision.

    A stamp without milliseconds stands for a whole second [ts, ts+1): it is inside if that second
    overlaps the window, so a sample logged 0.4 s after bench_start is not lost to truncation.
    """
    if whole_seconds:
        if start is not None and ts < start.replace(microsecond=0):
            return False
        return end is None or ts <= end
    return (start is None or ts >= start) and (end is None or ts <= end)
