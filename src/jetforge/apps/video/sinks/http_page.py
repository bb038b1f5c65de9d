"""The page :class:`~jetforge.apps.video.sinks.http.HttpSink` serves: the live MJPEG stream and the run's
counters, FPS and latency, polled from ``/stats.json`` twice a second.  Plain HTML and JavaScript (no external
resource: a headless board has no internet), and an inline icon so the browser asks for no ``/favicon.ico``."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>jetforge %(title)s</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1em; background: #111; color: #eee; }
 #video { max-width: 100%%; border: 1px solid #444; background: #000; }
 table { border-collapse: collapse; margin-top: .5em; }
 td { padding: 2px 12px 2px 0; font-variant-numeric: tabular-nums; }
 td:first-child { color: #9ab; }
 #state { color: #fc6; }
</style>
</head>
<body>
<h1>jetforge %(title)s</h1>
<img id="video" src="/stream.mjpg" alt="the annotated video, live">
<p id="state">connecting</p>
<table id="stats">
 <tr><td>frames</td><td id="frames">-</td></tr>
 <tr><td>FPS</td><td id="fps">-</td></tr>
 <tr><td>latency (last / median ms)</td><td id="latency">-</td></tr>
 <tr><td>dropped for this page's stream</td><td id="dropped">-</td></tr>
</table>
<table id="counters"></table>
<script>
"use strict";
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
async function poll() {
  try {
    const r = await fetch("/stats.json", {cache: "no-store"});
    const s = await r.json();
    document.getElementById("frames").textContent = s.frames;
    document.getElementById("fps").textContent = s.fps.toFixed(1);
    const l = s.latency_ms;
    document.getElementById("latency").textContent =
      (l.last === null ? "-" : l.last.toFixed(1)) + " / " + (l.median === null ? "-" : l.median.toFixed(1));
    document.getElementById("dropped").textContent = s.sink.dropped + s.sink.client_skipped;
    const table = document.getElementById("counters");
    table.replaceChildren();
    for (const [name, value] of Object.entries(s.counters)) {
      const row = document.createElement("tr"); cell(row, name); cell(row, String(value)); table.appendChild(row);
    }
    document.getElementById("state").textContent = s.running ? "live" : "the run has ended";
  } catch (e) {
    document.getElementById("state").textContent = "waiting for the app";
  }
}
poll();
setInterval(poll, 500);
</script>
</body>
</html>
"""

__all__ = ["PAGE"]
