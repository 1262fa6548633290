"""Open a trace in the Perfetto UI with one click, from report.html and compare.html.

Perfetto's UI takes a trace posted to it by the page that opened it (its docs, "Deep linking to
the Perfetto UI"): `window.open` the UI, post 'PING' until it answers 'PONG', then post
`{perfetto: {buffer, title, fileName}}`. The page must fetch the trace's bytes, so it has to be
served over http: `python -m analysis serve FOLDER`. Opened from file://, a button says so.

A test may let a page of the same server stand in for the UI (`?perfetto_ui=/stand-in.html`);
nothing but a path on the page's own origin is taken, so a link cannot send a trace elsewhere.
"""

from __future__ import annotations

from html import escape

UI = "https://ui.perfetto.dev"

_SCRIPT = """
(function () {
  var UI = "%(ui)s";
  function uiUrl() {
    var asked = new URLSearchParams(location.search).get("perfetto_ui");
    var local = asked && asked.charAt(0) === "/" && asked.charAt(1) !== "/" && asked.charAt(1) !== "\\\\";
    return local ? new URL(asked, location.href).href : UI;
  }
  function say(text) {
    var note = document.getElementById("perfetto-note");
    note.textContent = text;
    note.hidden = false;
  }
  function open(button) {
    var trace = button.getAttribute("data-trace");
    var title = button.getAttribute("data-title") || trace;
    var note = document.getElementById("perfetto-note");
    if (location.protocol === "file:") {
      say("Perfetto is handed a trace only by a page served over http, not by a file:// page: run  "
          + note.getAttribute("data-serve") + "  and click again there, or open ui.perfetto.dev "
          + "(Open trace file) and choose " + trace + ".");
      return;
    }
    var target = uiUrl(), origin = new URL(target).origin;
    var win = window.open(target);
    if (!win) {
      say("The browser blocked the Perfetto tab: allow pop-ups for this page and click again.");
      return;
    }
    say("Reading " + trace + " ...");
    fetch(trace).then(function (response) {
      if (!response.ok) throw new Error(response.status + " " + response.statusText);
      return response.arrayBuffer();
    }).then(function (buffer) {
      var tries = 0;
      var timer = setInterval(function () {
        if (++tries > 600) {  // 30 s
          clearInterval(timer);
          say("Perfetto did not answer within 30 s: is " + UI + " reachable from this browser?");
          return;
        }
        win.postMessage("PING", origin);
      }, 50);
      window.addEventListener("message", function onPong(event) {
        if (event.source !== win || event.data !== "PONG") return;
        clearInterval(timer);
        window.removeEventListener("message", onPong);
        win.postMessage({perfetto: {buffer: buffer, title: title, fileName: trace.split("/").pop()}}, origin);
        say("Sent " + trace + " (" + buffer.byteLength + " bytes) to Perfetto.");
      });
    }).catch(function (error) {
      say("Could not read " + trace + ": " + error.message);
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.perfetto");
    if (!button) return;
    event.preventDefault();  // a button inside <summary> must not fold the details
    open(button);
  });
})();
"""


def button(trace: str, title: str, label: str = "Perfetto") -> str:
    """A button that opens `trace` (a URL relative to the page) in the Perfetto UI."""
    return (f'<button type="button" class="perfetto" data-trace="{escape(trace, quote=True)}" '
            f'data-title="{escape(title, quote=True)}" title="open in ui.perfetto.dev">{escape(label)}</button>')


def script(folder: str) -> str:
    """The note the buttons write into and the script behind them; once per page, before </body>."""
    serve = f"python -m analysis serve {folder}"
    return (f'<p id="perfetto-note" class="note" hidden data-serve="{escape(serve, quote=True)}"></p>'
            f"<script>{_SCRIPT % {'ui': UI}}</script>")
