"""Checks of report pages: their tables against summary.json, and a real headless Chromium
(Debian's `chromium`) that loads a page, reports every image's decoded size and takes a
full-page screenshot. The page itself has no script: a test-only copy next to it (same
directory, so relative links resolve alike) gets a small probe script appended."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio")

PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return {plot: i.getAttribute('data-plot'), w: i.naturalWidth, h: i.naturalHeight, complete: i.complete}; });
  var pre = document.createElement('pre'); pre.id = '__probe';
  pre.textContent = JSON.stringify({imgs: imgs, height: document.documentElement.scrollHeight,
                                    scripts: document.scripts.length});
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:   # fresh profile
        return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


def load(page: Path, width: int = 1280) -> tuple[dict, str]:
    """(probe results, the DOM Chromium built) of a page, laid out at the screenshot's width: at
    Chromium's default 800 px the figures shrink and the height measured cut the screenshots short."""
    page = Path(page).resolve()
    probe_page = page.with_name(f".probe-{page.name}")
    text = page.read_text()
    probe_page.write_text(text.replace("</body>", PROBE + "</body>", 1))
    try:
        r = _run([f"--window-size={width},800", "--virtual-time-budget=10000", "--dump-dom",
                  probe_page.as_uri()])
    finally:
        probe_page.unlink()
    m = re.search(r'<pre id="__probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no probe output from chromium (rc {r.returncode}): {r.stderr[-2000:]}"
    import html as _html
    return json.loads(_html.unescape(m.group(1))), r.stdout


def screenshot(page: Path, out: Path, height: int, width: int = 1280) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    r = _run([f"--window-size={width},{min(max(height, 600), 16000)}", f"--screenshot={out}",
              Path(page).resolve().as_uri()])
    assert out.exists() and out.stat().st_size > 10_000, r.stderr[-2000:]
    return out


class Tables(HTMLParser):
    """Every table of a page as rows of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def tables(text: str) -> list[list[list[str]]]:
    p = Tables()
    p.feed(text)
    return p.tables


def main_row(text: str) -> dict:
    """The first table's first row, by column header."""
    t = tables(text)[0]
    return dict(zip(t[0], t[1]))


def expected_cells(summary: dict) -> dict:
    """The main table's cells recomputed from summary.json's numbers (the seed's units/rounding)."""
    b = summary["bench"]
    if summary["verdict"] in ("failed", "cancelled", "timeout", "running"):
        return {"Input TPS": "-", "Output TPS": "-", "Verdict": f"{summary['verdict']}: {summary['reasons'][0]}"}
    out = {"Input TPS": f"{b['input_tps']:.2f}", "Output TPS": f"{b['output_tps']:.2f}",
           "TTFT mean / p95": f"{b['ttft']['mean'] / 1000:.2f}s / {b['ttft']['p95'] / 1000:.2f}s",
           "TPOT mean / p95": f"{b['tpot']['mean']:.2f}ms / {b['tpot']['p95']:.2f}ms",
           "E2E mean / p95": f"{b['e2e']['mean'] / 1000:.2f}s / {b['e2e']['p95'] / 1000:.2f}s",
           "Duration": f"{b['duration_s']:.2f}s", "Requests ok/total": f"{b['completed']}/{b['total']}",
           "Verdict": summary["verdict"]}
    if summary["accept"]["accept_len"] is not None:
        out["Accept len / rate"] = f"{summary['accept']['accept_len']:.2f} / {summary['accept']['accept_rate']:.3f}"
    return out
