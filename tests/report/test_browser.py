"""Open report.html in headless Chromium (Debian's `chromium`, installed by `make chromium`).

1. `--dump-dom` of a test copy of the report with a probe script appended: after load, the script writes what the
   browser sees — the comparison table's rows and every <img>'s decoded size (`naturalWidth` / `naturalHeight`, 0 for
   an image the browser could not decode) — into the DOM, which Chromium prints.
2. `--screenshot` of the report itself: a non-trivial, non-blank PNG.

Skipped with the reason when Chromium is missing (`make chromium` records why it could not install it); a failure in
CI (`CI=true`), where `make test` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trace_rl.artifacts.store import RunDir
from trace_rl.report.html import write_html_report

PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({w: i.naturalWidth, h: i.naturalHeight, complete: i.complete,
                                               png: i.src.startsWith('data:image/png;base64,')}));
  const table = document.querySelector('table.comparison');
  const rows = table ? [...table.tBodies[0].rows].map(r => r.cells[0].innerText.split('\\n')[0]) : null;
  const sections = [...document.querySelectorAll('section')].map(s => s.id);
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({imgs, rows, sections, title: document.title});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe:
        return exe
    note = Path(__file__).resolve().parents[2] / ".venv" / ".chromium-unavailable"
    reason = note.read_text().strip() if note.exists() else "chromium is not installed (run `make chromium`)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and no chromium: {reason}")
    pytest.skip(reason)


def run_chromium(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_browser_renders_the_comparison_table_and_plots(full_run: RunDir, tmp_path: Path) -> None:
    report = write_html_report(full_run)
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    done = run_chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    match = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert match, f"no probe output (rc {done.returncode}): {done.stderr[-1500:]}"
    seen = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert seen["title"] == f"trace-rl — {full_run.name}"
    assert seen["sections"][:7] == [
        "run",
        "rollouts",
        "capabilities",
        "environments",
        "adapters",
        "routing",
        "comparison",
    ]
    assert seen["rows"] == [
        "Base model",
        "TRACE (routed adapters)",
        "GRPO on target",
        "GEPA (prompt optimisation)",
        "Best single adapter",
        "Multi-capability adapter",
    ]
    imgs = seen["imgs"]
    assert len(imgs) >= 7 and all(i["png"] and i["complete"] for i in imgs)
    assert all(i["w"] >= 200 and i["h"] >= 150 for i in imgs), imgs  # decoded by the browser, not broken


def test_browser_screenshot_is_not_blank(full_run: RunDir, tmp_path: Path) -> None:
    from PIL import Image

    report = write_html_report(full_run)
    shot = tmp_path / "report.png"
    done = run_chromium("--window-size=1280,3000", f"--screenshot={shot}", report.as_uri())
    assert shot.exists(), f"no screenshot (rc {done.returncode}): {done.stderr[-1500:]}"
    assert shot.stat().st_size > 50_000
    with Image.open(shot) as im:
        assert im.size == (1280, 3000)
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 50  # text, tables and plots, not an empty page
