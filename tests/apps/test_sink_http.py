"""``http://@:8080``: the live page in a real headless browser (Debian's chromium through Playwright), and a
client that never reads, which must neither stall the writer nor go uncounted."""

import contextlib
import json
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

from jetforge.apps.video.sinks.http import HttpSink, parse_bind
from jetforge.apps.video.sinks.live import DropSlot, LiveStats
from jetforge.errors import ConfigError
from tests.apps.live_servers import chromium_page

GREY_JS = """() => {
  const img = document.getElementById("video0");
  const c = document.createElement("canvas"); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d"); g.drawImage(img, 0, 0);
  return g.getImageData(8, 8, 1, 1).data[0];
}"""


def feed(sink: HttpSink, stats: LiveStats, stop: threading.Event, fps: float = 30.0) -> None:
    """Frame i is a flat grey of (i * 5) % 250 (what the page's pixel shows), with a per-frame record."""
    i = 0
    while not stop.is_set() and i < 1000:
        sink.write(np.full((120, 160, 3), (i * 5) % 250, np.uint8))
        stats.record({"type": "people", "stream": 0, "frame": i, "latency_ms": 10.0 + i % 3, "people": i % 7,
                      "counts": {"walkway": {"forward": i // 10}}})
        i += 1
        time.sleep(1.0 / fps)


def wait_until(condition, seconds: float = 5.0) -> None:
    """Poll ``condition`` every 10 ms until it holds or ``seconds`` pass (the assertions after it say which)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@contextlib.contextmanager
def fed_page(sink: HttpSink, feeder_fn, *args):
    """A browser page of ``sink`` while ``feeder_fn(sink, *args, stop)`` writes frames on a thread; the feeder is
    stopped and joined and the sink closed after, whatever the test did."""
    stop = threading.Event()
    feeder = threading.Thread(target=feeder_fn, args=(sink,) + args + (stop,), daemon=True)
    feeder.start()
    try:
        with chromium_page() as (page, errors):
            page.goto(sink.url)
            yield page, errors
    finally:
        stop.set()
        feeder.join()
        sink.close()


def test_the_page_shows_the_live_video_and_numbers_in_a_browser():
    stats = LiveStats()
    sink = HttpSink("http://127.0.0.1:0", stats=stats, title="people")
    with fed_page(sink, feed, stats) as (page, errors):
        page.wait_for_function('document.getElementById("video0").naturalWidth === 160', timeout=10000)
        page.wait_for_function('document.getElementById("state").textContent === "live"', timeout=10000)
        greys, frames = [], []
        for _ in range(3):
            greys.append(page.evaluate(GREY_JS))
            frames.append(int(page.inner_text("#frames")))
            page.wait_for_timeout(700)
        fps = float(page.inner_text("#fps"))
        counters = page.inner_text("#counters")
        assert page.title() == "jetforge people"
    assert len(set(greys)) == 3, greys  # the picture changes: new frames arrive
    assert frames[0] < frames[1] < frames[2], frames  # the counters change
    assert 10.0 < fps < 40.0, fps  # fed at ~30 fps (sleep-paced, so at most 30; a loaded CI machine is slower)
    assert "people" in counters and "counts.walkway.forward" in counters
    assert errors == []
    assert sink.report()["clients_served"] >= 1


def test_a_client_that_never_reads_never_stalls_the_writer_and_is_counted():
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for _ in range(4)]  # noise: ~100 KB JPEGs

    def write_all(sink: HttpSink, n: int = 200) -> float:
        """200 frames, one every 5 ms (the JPEG thread needs longer for noise: some are dropped); 20 MB in all,
        more than the loopback socket buffers hold, so the silent client's send blocks."""
        start = time.perf_counter()
        for i in range(n):
            sink.write(frames[i % 4])
            time.sleep(0.005)
        return time.perf_counter() - start

    with HttpSink("http://127.0.0.1:0", send_timeout_s=1.0) as alone:
        baseline = write_all(alone)
    sink = HttpSink("http://127.0.0.1:0", send_timeout_s=1.0)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", sink.port))
    client.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")  # ... and never reads
    wait_until(lambda: sink.watching > 0)
    stalled = write_all(sink)
    time.sleep(1.5)  # past send_timeout_s: the server lets the silent client go
    sink.close()
    client.close()
    report = sink.report()
    # The writer only copies each frame (encoding happens on the sink's thread): the same pace with or without
    # the silent client, within a margin for a shared 2-core machine and far below one blocked send (1 s).
    assert stalled < 2 * baseline + 0.5, (stalled, baseline)
    assert report["frames"] == 200
    assert report["client_skipped"] > 0  # frames the silent client never got
    assert report["dropped"] + report["encoded"] <= report["frames"]  # a frame is encoded, dropped or unwatched


def test_the_hand_off_replaces_and_counts_what_the_consumer_did_not_take():
    slot: DropSlot[int] = DropSlot()
    for i in range(5):
        slot.put(i)  # a consumer that is busy: only the newest survives
    assert slot.take(0.0) == 4 and slot.dropped == 4 and slot.put_count == 5
    assert slot.take(0.01) is None
    slot.close()
    assert slot.take(1.0) is None  # closed: returns at once


def test_stats_json_and_the_addresses():
    stats = LiveStats()
    stats.record({"type": "classify", "stream": 0, "frame": 0, "latency_ms": 12.5, "top1": "cat"})
    with HttpSink("http://127.0.0.1:0", stats=stats) as sink:
        data = json.load(urllib.request.urlopen(sink.url + "stats.json", timeout=5))
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(sink.url + "nothing", timeout=5)
    assert data["frames"] == 1 and data["latency_ms"]["last"] == 12.5 and data["counters"]["top1"] == "cat"
    assert data["sink"]["kind"] == "http" and data["running"] is True
    assert parse_bind("http://@:8080") == ("", 8080)
    assert parse_bind("http://127.0.0.1") == ("127.0.0.1", 8080)
    with pytest.raises(ConfigError, match="port"):
        parse_bind("http://@:http")
    with pytest.raises(ConfigError, match="path"):
        parse_bind("http://@:8080/live")


def _tile_js(k: int) -> str:
    """Tile k's left and right pixel greys: the left says which stream it shows, the right which frame."""
    return """() => {
  const img = document.getElementById("video%d");
  if (!img.naturalWidth || !img.complete) return null;
  const c = document.createElement("canvas"); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext("2d"); g.drawImage(img, 0, 0);
  const left = g.getImageData(8, 60, 1, 1).data, right = g.getImageData(150, 60, 1, 1).data;
  if (left[3] === 0 || right[3] === 0) return null;  // nothing drawn: a pulled JPEG between src and its decode
  return [left[0], right[0]];
}""" % k


def _tile(page, k: int):
    """Tile k's greys, asked again while a pulling tile is between two JPEGs (no picture for a moment: on a loaded
    machine a tile once read as transparent black, [0, 0], with its size already known)."""
    for _ in range(100):
        value = page.evaluate(_tile_js(k))
        if value is not None:
            return value
        page.wait_for_timeout(20)
    raise AssertionError("tile %d shows no picture" % k)


def feed_streams(sink: HttpSink, streams: int, stop: threading.Event, fps: float = 30.0) -> None:
    """Stream k's frames: left half a flat grey of 40 * k + 20 (which stream), right half (i * 5) % 250 (which
    frame); the streams' frames interleave as an app's do."""
    i = 0
    while not stop.is_set() and i < 1000:
        for k in range(streams):
            image = np.full((120, 160, 3), (i * 5) % 250, np.uint8)
            image[:, :80] = 40 * k + 20
            sink.write(image, k)
        i += 1
        time.sleep(1.0 / fps)


@pytest.mark.parametrize("streams", [2, 6])
def test_every_stream_has_its_own_live_tile_in_a_browser(streams):
    """2 streams: MJPEG tiles; 6 (more than a browser's connections allow as MJPEG): tiles that pull JPEGs.
    Each tile shows its own stream (the left grey, within JPEG's error of a flat area: a few levels, 15 asked)
    and advances (the right grey changes)."""
    sink = HttpSink("http://127.0.0.1:0", title="people", streams=streams)
    with fed_page(sink, feed_streams, streams) as (page, errors):
        for k in range(streams):
            page.wait_for_function('document.getElementById("video%d").naturalWidth === 160' % k,
                                   timeout=10000)
        first = [_tile(page, k) for k in range(streams)]
        page.wait_for_timeout(700)
        later = [_tile(page, k) for k in range(streams)]
        pulls = page.evaluate('document.getElementById("video0").src')
    for k in range(streams):
        assert abs(first[k][0] - (40 * k + 20)) <= 15 and abs(later[k][0] - (40 * k + 20)) <= 15, (k, first, later)
        assert first[k][1] != later[k][1], (k, first, later)  # the tile's picture advances
    assert ("/frame/0.jpg" in pulls) == (streams > 4) and ("/stream/0.mjpg" in pulls) == (streams <= 4)
    assert errors == []


def test_stream_routes_and_the_fair_hand_off():
    from jetforge.apps.video.sinks.live import KeyedDropSlot

    slot: KeyedDropSlot[int] = KeyedDropSlot()
    for i in range(3):
        slot.put("a", i)  # stream a is fast: only its newest waits ...
    slot.put("b", 10)
    slot.put("a", 3)
    assert slot.take(0.0) == ("a", 3) and slot.take(0.0) == ("b", 10)  # ... and b is not starved
    assert slot.dropped == 3 and slot.take(0.01) is None
    with HttpSink("http://127.0.0.1:0", streams=2) as sink:
        sink.write(np.full((120, 160, 3), 200, np.uint8), 1)
        sink.write(np.full((120, 160, 3), 200, np.uint8), 7)  # no tile for stream 7: ignored
        wait_until(lambda: sink.frames_of(1).jpeg is not None)
        jpeg = urllib.request.urlopen(sink.url + "frame/1.jpg", timeout=5).read()
        for missing in ("frame/0.jpg", "frame/2.jpg", "stream/2.mjpg", "stream/1.jpg"):
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(sink.url + missing, timeout=5)
    assert jpeg[:2] == b"\xff\xd8" and sink.report()["frames"] == 1 and sink.report()["streams"] == 2


def test_an_unwatched_page_wants_a_first_frame_then_only_while_someone_watches():
    """``wants`` is what the GPU path asks before copying a frame back and drawing it: a page nobody watches must
    cost no copies after its first frame; an MJPEG client or a recent still pull turns it back on."""
    import jetforge.apps.video.sinks.http as http_module

    with HttpSink("http://127.0.0.1:0", streams=2) as sink:
        assert sink.wants(0) and sink.wants(1)  # no JPEG yet: the first frame is taken
        assert not sink.wants(2) and not sink.wants(-1)  # no tile for these streams
        sink.write(np.full((120, 160, 3), 90, np.uint8), 0)
        wait_until(lambda: sink.frames_of(0).jpeg is not None)
        assert not sink.wants(0) and sink.wants(1)  # stream 0 has its still; nobody watches it
        taken = sink.report()["frames"]
        sink.write(np.full((120, 160, 3), 91, np.uint8), 0)  # counted, not copied or encoded
        assert sink.report()["frames"] == taken + 1 and sink._slot.take(0.0) is None
        urllib.request.urlopen(sink.url + "frame/0.jpg", timeout=5).read()  # a page pulling stills watches
        assert sink.wants(0)
        sink._pulled[0] -= http_module.PULL_WATCH_S + 1.0  # the pull is older than the watch window
        assert not sink.wants(0)
        client = urllib.request.urlopen(sink.url + "stream/0.mjpg", timeout=5)  # an MJPEG client watches
        try:
            wait_until(lambda: sink.wants(0))
            assert sink.wants(0)
        finally:
            client.close()


def test_outputs_want_a_stream_while_a_file_takes_it_or_its_page_is_watched(tmp_path):
    """``Outputs.wants_frames`` (asked per frame by both paths before drawing): a file output always wants its
    stream's frames; an http page only until it has a still and then while watched; ``takes_frames`` (asked once at
    the start) stays true for the page."""
    from jetforge.apps.video.sinks.outputs import open_sinks

    shape = (30.0, (160, 120))
    with open_sinks(["http://127.0.0.1:0"], [shape, shape]) as outputs:
        page = outputs.slots[0].sink
        assert outputs.wants_frames(0) and outputs.wants_frames(1)
        outputs.frame(0, np.full((120, 160, 3), 50, np.uint8))
        wait_until(lambda: page.frames_of(0).jpeg is not None)
        assert not outputs.wants_frames(0) and outputs.takes_frames(0) and outputs.wants_frames(1)
    video = tmp_path / "out.mp4"
    with open_sinks(["http://127.0.0.1:0", str(video)], [shape]) as outputs:
        outputs.frame(0, np.full((120, 160, 3), 50, np.uint8))
        wait_until(lambda: outputs.slots[0].sink.frames_of(0).jpeg is not None)
        assert outputs.wants_frames(0)  # the file takes every frame


def test_the_cpu_app_draws_a_frame_only_when_an_output_takes_it(tmp_path):
    """The CPU app's sink with no annotated MP4 (``--no-video``) and only an unwatched page: after the page's first
    still, frames are recorded in events.jsonl but not drawn (drawing is the task's per-frame overlay work)."""
    from jetforge.apps.pipeline.app import _AppSink
    from jetforge.apps.pipeline.stages import Item, Status
    from jetforge.apps.video.sinks.file import JsonLinesSink
    from jetforge.apps.video.sinks.outputs import open_sinks
    from jetforge.apps.video.sources.base import Frame

    class CountingTask:
        name = "probe"
        drawn = 0

        def annotate(self, image, item, status):
            CountingTask.drawn += 1

    events = JsonLinesSink(tmp_path / "events.jsonl")
    with open_sinks(["http://127.0.0.1:0"], [(30.0, (160, 120))]) as outputs:
        sink = _AppSink(CountingTask(), events, [None], outputs)
        page = outputs.slots[0].sink
        sink(Item(Frame(0, 0.0, np.zeros((120, 160, 3), np.uint8)), event={}), Status())
        wait_until(lambda: page.frames_of(0).jpeg is not None)
        for i in range(1, 5):
            sink(Item(Frame(i, i / 30.0, np.zeros((120, 160, 3), np.uint8)), event={}), Status())
    events.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert CountingTask.drawn == 1 and len(lines) == 5
