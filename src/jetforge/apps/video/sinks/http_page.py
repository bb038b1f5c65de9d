"""The page :class:`~jetforge.apps.video.sinks.http.HttpSink` serves: one tile per stream (``<img id="video<k>">``,
the live MJPEG stream ``/stream/<k>.mjpg``; past :data:`MJPEG_TILES` streams each tile pulls ``/frame/<k>.jpg``
again as soon as the last one loaded, since a browser opens at most six connections to one server) and the
run's counters, FPS and latency, polled from ``/stats.json`` twice a second.  Plain HTML and JavaScript (no external
resource: a headless board has no internet), and an inline icon so the browser asks for no ``/favicon.ico``."""

MJPEG_TILES = 4  # tiles shown as MJPEG streams: with the stats poll and the page, within six connections

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>jetforge %(title)s</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1em; background: #111; color: #eee; }
 #tiles { display: flex; flex-wrap: wrap; gap: 8px; }
 figure { margin: 0; max-width: %(tile_width)s; }
 figure img { max-width: 100%%; border: 1px solid #444; background: #000; display: block; }
 figcaption { color: #9ab; font-size: 90%%; }
 table { border-collapse: collapse; margin-top: .5em; }
 td { padding: 2px 12px 2px 0; font-variant-numeric: tabular-nums; }
 td:first-child { color: #9ab; }
 #state { color: #fc6; }
</style>
</head>
<body>
<h1>jetforge %(title)s</h1>
<div id="tiles">
%(tiles)s
</div>
<p id="state">connecting</p>
<table id="stats">
 <tr><td>frames</td><td id="frames">-</td></tr>
 <tr><td>FPS</td><td id="fps">-</td></tr>
 <tr><td>latency (last / median ms)</td><td id="latency">-</td></tr>
 <tr><td>dropped for this page's streams</td><td id="dropped">-</td></tr>
</table>
<table id="counters"></table>
<script>
"use strict";
const PULL = %(pull)s;
function pull(img, k) {
  let n = 0;
  img.onload = img.onerror = () => setTimeout(() => { img.src = "/frame/" + k + ".jpg?n=" + (++n); },
                                              img.complete && img.naturalWidth ? 40 : 200);  // 25 pulls a second at most
  img.src = "/frame/" + k + ".jpg?n=0";
}
if (PULL) document.querySelectorAll("img.tile").forEach((img) => pull(img, Number(img.dataset.stream)));
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

TILE = ('<figure><img class="tile" id="video%(k)d" data-stream="%(k)d"%(src)s alt="stream %(k)d, live">'
        '<figcaption>stream %(k)d</figcaption></figure>')


def page(title: str, streams: int = 1) -> str:
    """The page for ``streams`` streams: MJPEG tiles up to :data:`MJPEG_TILES`, pulled JPEG tiles beyond."""
    pull = streams > MJPEG_TILES
    tiles = "\n".join(TILE % {"k": k, "src": "" if pull else ' src="/stream/%d.mjpg"' % k} for k in range(streams))
    return PAGE % {"title": title, "tiles": tiles, "pull": "true" if pull else "false",
                   "tile_width": "100%" if streams == 1 else "49%" if streams <= 4 else "24%"}


__all__ = ["MJPEG_TILES", "PAGE", "page"]
