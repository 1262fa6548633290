"""`python -m analysis serve` and the Perfetto buttons: the server (what it serves and refuses)
and the page's script up to the postMessage, in headless Chromium with a local page standing in
for the Perfetto UI's window (it answers PING with PONG and reports the trace it was posted)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from analysis import analyse_folder
from analysis.__main__ import main
from analysis.serve import make_server
from tests.conftest import ROOT, hand_made_job, hand_made_point, jitter, processes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TRACE = "0_matmul_add_8_bf16_cold_eager/t.json"

STAND_IN = """<!doctype html><html><head><title>stand-in</title></head><body><script>
window.addEventListener("message", function (e) {
  if (e.data === "PING") { e.source.postMessage("PONG", "*"); return; }
  if (e.data && e.data.perfetto) {
    var p = e.data.perfetto;
    window.opener.postMessage({received: p.buffer.byteLength, title: p.title, fileName: p.fileName}, "*");
  }
});
</script></body></html>"""

# Clicks the button chosen by SELECTOR once the page has loaded; writes what the stand-in got, or
# the note the button wrote, into the title, which --dump-dom shows.
PROBE = """<script>
window.addEventListener("message", function (e) {
  if (e.data && e.data.received !== undefined)
    document.title = "GOT:" + e.data.received + ":" + e.data.fileName + ":" + e.data.title;
});
window.addEventListener("load", function () {
  document.querySelector(SELECTOR).click();
  setTimeout(function () {
    if (!document.title.startsWith("GOT:")) document.title = "NOTE:" + document.getElementById("perfetto-note").textContent;
  }, 2000);
});
</script>"""


@pytest.fixture
def sweep(tmp_path) -> Path:
    folder = tmp_path / "sweep"
    hand_made_job(folder, 0, jitter(100, 6))
    hand_made_job(folder, 1, jitter(100, 6), size=16)
    analyse_folder(folder, progress=lambda line: None)
    return folder


@contextmanager
def serving(folder: Path):
    server, url = make_server(folder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url.rsplit("/", 1)[0]
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as response:  # no proxy
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_the_server_serves_the_report_and_its_traces_and_nothing_outside(sweep, tmp_path):
    (tmp_path / "secret.txt").write_text("not for the browser")
    (sweep / "0_matmul_add_8_bf16_cold_eager" / "escape").symlink_to(tmp_path / "secret.txt")
    server, url = make_server(sweep)
    server.server_close()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/report\.html", url)
    with serving(sweep) as root:
        status, page = get(f"{root}/report.html")
        assert status == 200 and b'class="perfetto"' in page and f'data-trace="{TRACE}"'.encode() in page
        assert get(f"{root}/{TRACE}") == (200, (sweep / TRACE).read_bytes())
        assert get(f"{root}/../secret.txt")[0] == 404
        assert get(f"{root}/%2e%2e/secret.txt")[0] == 404
        assert get(f"{root}/0_matmul_add_8_bf16_cold_eager/escape")[0] == 404


def test_a_comparison_serves_both_sides_traces(tmp_path, capsys):
    hand_made_job(tmp_path / "base", 0, jitter(100, 6))
    hand_made_job(tmp_path / "new", 0, jitter(110, 6))
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "new"), "--out", str(tmp_path / "cmp")]) == 0
    server, url = make_server(tmp_path / "cmp")
    server.server_close()
    assert url.endswith("/compare.html")
    with serving(tmp_path / "cmp") as root:
        page = get(f"{root}/compare.html")[1].decode()
        assert f'data-trace="_base/{TRACE}"' in page and f'data-trace="_new/{TRACE}"' in page
        assert get(f"{root}/_base/{TRACE}") == (200, (tmp_path / "base" / TRACE).read_bytes())
        assert get(f"{root}/_new/{TRACE}") == (200, (tmp_path / "new" / TRACE).read_bytes())
        assert get(f"{root}/_new/../../base/{TRACE}")[0] == 404


@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 0, "stopped"), (signal.SIGTERM, 143, "interrupted (SIGTERM)")])
def test_serve_stops_on_ctrl_c_with_0_and_on_sigterm_with_143(sweep, signum, code, said):
    """Ctrl-C is how a server is stopped (exit 0); SIGTERM is a stop from outside, as for every
    other command (143)."""
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "serve", str(sweep), "--no-browser"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {sweep} at http://127.0.0.1:")
        assert get(line.split()[3])[0] == 200  # serving now
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err
    assert said in out + err and "Traceback" not in err


def test_serve_refuses_a_folder_with_no_page(tmp_path, capsys):
    assert main(["serve", str(tmp_path), "--no-browser"]) == 2
    assert "no report.html or compare.html" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing"), "--no-browser"]) == 2
    for port in ("70000", "-1"):  # helper-52: bind()'s OverflowError, a traceback and exit 1
        with pytest.raises(SystemExit) as stopped:
            main(["serve", str(tmp_path), "--no-browser", "--port", port])
        assert stopped.value.code == 2 and f"--port: {port} is not a port" in capsys.readouterr().err


# --- the page's script, in a browser ---------------------------------------------------------------


def chromium_title(url: str, profile: Path) -> str:
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-popup-blocking",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )
    title = re.search(r"<title>(.*?)</title>", done.stdout, re.S)
    assert title, done.stdout[:500] + done.stderr[-2000:]
    return title.group(1)


def with_probe(page: Path, selector: str) -> None:
    probe = PROBE.replace("SELECTOR", repr(selector))
    page.write_text(page.read_text().replace("</body>", probe + "</body>"))


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (CI installs it)")
def test_the_button_posts_the_trace_to_the_ui_window(sweep, tmp_path):
    (sweep / "stand-in.html").write_text(STAND_IN)
    with_probe(sweep / "report.html", "button.perfetto")
    with serving(sweep) as root:
        title = chromium_title(f"{root}/report.html?perfetto_ui=/stand-in.html", tmp_path / "profile")
    size = (sweep / TRACE).stat().st_size
    assert title == f"GOT:{size}:t.json:0_matmul_add_8_bf16_cold_eager t.json"


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (CI installs it)")
def test_the_stand_in_must_be_on_the_pages_own_server(sweep, tmp_path):
    """?perfetto_ui= takes only a path of the page's own origin: a stand-in on another origin (a
    second server, another port), which would answer and take the trace, gets nothing."""
    (sweep / "stand-in.html").write_text(STAND_IN)
    with_probe(sweep / "report.html", "button.perfetto")
    with serving(sweep) as root, serving(sweep) as other:
        elsewhere = other.split(":", 1)[1]  # //127.0.0.1:PORT, the same page's folder on another origin
        title = chromium_title(f"{root}/report.html?perfetto_ui={elsewhere}/stand-in.html", tmp_path / "profile")
    assert not title.startswith("GOT:"), title  # it went to ui.perfetto.dev, which this machine cannot reach


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (CI installs it)")
def test_from_a_file_page_the_button_says_to_serve(sweep, tmp_path):
    with_probe(sweep / "report.html", "button.perfetto")
    title = chromium_title((sweep / "report.html").as_uri(), tmp_path / "profile")
    assert title.startswith("NOTE:") and f"python -m analysis serve {sweep}" in title


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (CI installs it)")
def test_compare_html_renders_and_its_new_button_posts_the_new_trace(tmp_path, capsys):
    hand_made_point(tmp_path / "base", 0, processes(100))
    hand_made_point(tmp_path / "new", 0, processes(300))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "new"), "--out", str(out)]) == 0
    (out / "stand-in.html").write_text(STAND_IN)
    page = out / "compare.html"
    plain = page.read_text()
    with_probe(page, "button.perfetto[data-trace^='_new/']")
    with serving(out) as root:
        title = chromium_title(f"{root}/compare.html?perfetto_ui=/stand-in.html", tmp_path / "profile")
    size = (tmp_path / "new" / TRACE).stat().st_size
    assert title == f"GOT:{size}:t.json:new: 0_matmul_add_8_bf16_cold_eager"
    # and the page as a person sees it: its plot loads, regressions come first
    page.write_text(plain.replace("</body>", "<script>window.addEventListener('load', () => { document.title = "
                                  "'IMAGES:' + Array.from(document.images).map(i => i.complete && i.naturalWidth > 0 "
                                  "? 1 : 0).join('') + ':H2:' + Array.from(document.querySelectorAll('h2'))"
                                  ".map(h => h.textContent).join('|'); });</script></body>"))
    title = chromium_title(page.as_uri(), tmp_path / "profile2")
    assert title.startswith("IMAGES:1:H2:Regressions (slower)|"), title
