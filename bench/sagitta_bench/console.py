"""The web console against the demo collection: page load times in a real
browser, the assets' size, and a screenshot of each page.

Starts the real ``sagitta serve`` (``target/release/sagitta``, or
``--bin`` / ``$SAGITTA_BIN``) on free loopback ports with API keys, loads
the demo collection (the bundled sample: 10,000 MiniLM vectors and their
passages, BM25 over the text, the built-in embedding model) over HTTP,
then drives Debian's Chromium (headless, through Playwright):

* **load time** of each page, ``--rounds`` times in a fresh browser
  context (no cache, the key entered into the session first): the time
  from navigation start until the page shows its data (the collections
  table's row, the collection's sample rows, the search page's form with
  the collection list, the live page's first chart point), read from the
  browser's own clock (``performance.now()``); median and max;
* **assets**: bytes of every file under ``/ui/``, raw and gzip-compressed;
* **screenshots** (``--shots DIR``, default ``docs/console``) of every
  page, the live page's while searches and upserts run against the
  server, and the segments and history of a second collection with 256
  KiB segments written meanwhile (``segments.png``).

``python -m sagitta_bench.console --rounds 10``
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
KEY = "admin-key-for-the-console-bench"
ASSETS = ["", "app.js", "app.css", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css"]
# (page, fragment, JS condition meaning "the page shows its data")
PAGES = [
    ("collections", "#/", "document.querySelector('#collections tr[data-collection=\"sample\"]')"),
    ("collection", "#/c/sample", "document.querySelectorAll('#sample tbody tr').length === 20"),
    ("search", "#/search/sample", "document.querySelector('#s-collection option')"),
    ("live", "#/live", "Number(document.querySelector('#chart-qps')?.dataset.points) >= 1"),
]


# Records the browser's clock the moment a DOM change makes the page's
# condition true (a MutationObserver, so no polling delay is measured).
WATCH = """
new MutationObserver((_, obs) => {
  try {
    if (%s) { window.__shown = performance.now(); obs.disconnect(); }
  } catch (e) {}
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def start(binary: str, data: Path, keys: Path) -> tuple[subprocess.Popen, str]:
    args = ["serve", "--data", str(data), "--http", "127.0.0.1:0", "--flight", "127.0.0.1:0"]
    p = subprocess.Popen(
        [binary, *args, "--api-keys", str(keys)],
        stdout=subprocess.PIPE,
        stderr=open(data.with_suffix(".log"), "ab"),
    )
    addrs = json.loads(p.stdout.readline())
    return p, "http://" + addrs["http"]


def load_demo(url: str) -> tuple[list[str], np.ndarray]:
    import sagitta

    sample = REPO / "data" / "sample"
    texts = gzip.open(sample / "base_texts.txt.gz", "rt", encoding="utf-8").read().splitlines()
    vecs = np.load(sample / "base.f16.npy").astype(np.float32)
    col = sagitta.Client(url, api_key=KEY).create_collection(
        "sample", ndim=384, text_fields=["text"], embed_model="all-minilm-l6-v2"
    )
    for s in range(0, len(vecs), 1000):
        e = min(len(vecs), s + 1000)
        col.upsert(np.arange(s, e), vecs[s:e], payload={"text": texts[s:e]})
    return texts, vecs


def assets(url: str) -> list[tuple[str, int, int]]:
    out = []
    for a in ASSETS:
        body = urllib.request.urlopen(url + "/ui/" + a).read()
        out.append((a or "index.html", len(body), len(gzip.compress(body, 9))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_bin = os.environ.get("SAGITTA_BIN", str(REPO / "target/release/sagitta"))
    ap.add_argument("--bin", default=default_bin)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--shots", default=str(REPO / "docs" / "console"))
    ap.add_argument("--chromium", default=os.environ.get("SAGITTA_CHROMIUM", "/usr/bin/chromium"))
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="sagitta-console-"))
    keys = tmp / "keys"
    keys.write_text(f"admin {KEY}\n")
    proc, url = start(a.bin, tmp / "data", keys)
    stop = threading.Event()
    try:
        texts, vecs = load_demo(url)
        sizes = assets(url)
        times: dict[str, list[float]] = {name: [] for name, _, _ in PAGES}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            for _ in range(a.rounds):
                for name, frag, ready in PAGES:
                    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
                    page = ctx.new_page()
                    page.add_init_script(f"sessionStorage.setItem('sagitta.apiKey', {KEY!r})")
                    page.add_init_script(WATCH % ready)
                    page.goto(url + "/ui/" + frag)
                    ms = page.wait_for_function("() => window.__shown").json_value()
                    times[name].append(float(ms))
                    ctx.close()
            shots = Path(a.shots)
            shots.mkdir(parents=True, exist_ok=True)

            import sagitta

            client = sagitta.Client(url, api_key=KEY)
            # A collection with small segments, written all through the
            # screenshots: its page shows seals, builds and merges.
            client.create_collection(
                "stream", ndim=384, text_fields=["text"], segment_size=256 << 10
            )

            def traffic():
                c = sagitta.Client(url, api_key=KEY)
                sample, stream = c.collection("sample"), c.collection("stream")
                i = 0
                while not stop.is_set():
                    j = i % len(vecs)
                    sample.search(vecs[j], 10)
                    if i % 20 == 0:
                        sample.upsert([100000 + i], vecs[j : j + 1], payload={"text": [texts[j]]})
                    if i % 4 == 0:
                        k = (i // 4 * 25) % len(vecs)
                        rows = np.arange(k, min(k + 25, len(vecs)))
                        stream.upsert(rows, vecs[rows], payload={"text": [texts[r] for r in rows]})
                    i += 1

            t = threading.Thread(target=traffic, daemon=True)
            t.start()
            ctx = browser.new_context(viewport={"width": 1300, "height": 900})
            page = ctx.new_page()
            page.add_init_script(f"sessionStorage.setItem('sagitta.apiKey', {KEY!r})")
            for name, frag, ready in PAGES:
                page.goto(url + "/ui/" + frag)
                page.wait_for_function(f"() => {ready}")
                if name == "search":
                    page.fill("#s-text", "XML parser library for Python")
                    page.click("#s-run")
                    page.wait_for_selector("#hits tbody tr")
                if name in ("live", "collection"):
                    # Enough samples for lines (the live page keeps 120 s).
                    n = 30 if name == "live" else 3
                    page.wait_for_function(
                        f"() => Number(document.body.dataset.polls) >= {n}", timeout=120_000
                    )
                page.screenshot(path=str(shots / f"{name}.png"), full_page=name != "collection")
            page.goto(url + "/ui/#/c/stream")
            five = "() => document.querySelectorAll('#history .events div').length >= 5"
            page.wait_for_function(five, timeout=120_000)
            polls = int(page.evaluate("document.body.dataset.polls"))
            page.wait_for_function(f"() => Number(document.body.dataset.polls) >= {polls + 2}")
            page.locator("#segments").screenshot(path=str(shots / "segments.png"))
            ctx.close()
            browser.close()
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"console assets ({url}/ui/):")
    for name, raw, gz in sizes:
        print(f"  {name:26} {raw:8,d} B  {gz:7,d} B gzip")
    print(f"  {'total':26} {sum(s[1] for s in sizes):8,d} B  {sum(s[2] for s in sizes):7,d} B gzip")
    print(f"page load, navigation start to data shown, {a.rounds} fresh contexts each (ms):")
    for name, ts in times.items():
        print(f"  {name:12} median {statistics.median(ts):7.1f}   max {max(ts):7.1f}")
    names = ",".join([p[0] for p in PAGES] + ["segments"])
    print(f"screenshots: {a.shots}/{{{names}}}.png")
    with open("/proc/loadavg") as f:
        print("load average:", " ".join(f.read().split()[:3]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
