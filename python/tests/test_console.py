"""The web console (/ui) in a real browser: Playwright driving Debian's
Chromium (headless) against the real ``sagitta serve`` with the demo
collection (the bundled sample, as ``sagitta demo`` loads it) and API keys
of every role."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Page, expect, sync_playwright
from server_util import Server
from test_server import raw

import sagitta

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
ADMIN = "admin-key-for-console-tests"
WRITER = "write-key-for-console-tests"
READER = "read-key-for-console-tests"
# The first text search in a server loads MiniLM and embeds the query; on a
# loaded CI host that took over Playwright's default 5 s once.
FIRST_EMBED_MS = 30_000
HOSTILE = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> hostile payload'


def chromium() -> str:
    """Debian's Chromium (scripts/chromium installs it); $SAGITTA_CHROMIUM overrides."""
    path = os.environ.get("SAGITTA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(path).exists(), "no Chromium: run scripts/chromium (Debian's chromium package)"
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("console")
    keys = d / "keys"
    keys.write_text(f"admin {ADMIN}\nwrite {WRITER}\nread {READER}\n")
    s = Server(d / "data", "--api-keys", str(keys))
    yield s
    assert s.stop() == 0, s.log()[-2000:]


@pytest.fixture(scope="module")
def demo(server):
    """The demo collection: the sample's 10,000 passages and their MiniLM
    vectors, with BM25 over the text and the built-in embedding model."""
    texts = gzip.open(SAMPLE / "base_texts.txt.gz", "rt", encoding="utf-8").read().splitlines()
    vecs = np.load(SAMPLE / "base.f16.npy").astype(np.float32)
    n = len(vecs)
    client = sagitta.Client(server.url, api_key=ADMIN)
    col = client.create_collection(
        "sample", ndim=384, text_fields=["text"], embed_model="all-minilm-l6-v2"
    )
    for s in range(0, n, 1000):
        e = min(n, s + 1000)
        col.upsert(np.arange(s, e), vecs[s:e], payload={"text": texts[s:e]})
    return col, texts, vecs


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield b
        b.close()


class Console:
    """A page with its console errors and uncaught exceptions recorded."""

    def __init__(self, browser, server: Server):
        self.context = browser.new_context(viewport={"width": 1300, "height": 900})
        self.page: Page = self.context.new_page()
        self.url = server.url + "/ui/"
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def _console(self, m) -> None:
        if m.type == "error":
            self.errors.append(f"console.error: {m.text}")

    def open(self, fragment: str = "#/") -> Page:
        self.page.goto(self.url + fragment)
        return self.page

    def sign_in(self, key: str) -> None:
        """Enters the key once, through the page's dialog."""
        p = self.page
        p.click("#key-button")
        p.fill("#key-input", key)
        p.click("#key-save")
        expect(p.locator("#key-dialog")).not_to_be_visible()
        expect(p.locator("#who")).to_contain_text("role: ")
        # Before a key the page made one request (GET /whoami, refused
        # with 401, which Chromium logs) and polls nothing: count errors
        # from here.
        self.errors.clear()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser, server, demo):
    c = Console(browser, server)
    yield c
    c.close()


def test_every_page_loads_without_console_errors(console, demo):
    _col, texts, _vecs = demo
    p = console.open()
    # Without a key the page says what is missing instead of going blank.
    expect(p.locator("#banner")).to_contain_text("needs an API key")
    expect(p.locator("#sign-in")).to_be_visible()
    assert len(console.errors) == 1 and "401" in console.errors[0]
    console.sign_in(ADMIN)
    expect(p.locator("#who")).to_have_text("role: admin")
    expect(p.locator("#banner")).to_be_hidden()
    row = p.locator('#collections tr[data-collection="sample"]')
    expect(row).to_contain_text("10,000")
    expect(row.locator("td").nth(6)).not_to_be_empty()
    # The key is kept for the session: every page loads with it.
    for frag, ready in [
        ("#/c/sample", "#sample tbody tr"),
        ("#/search/sample", "#search-form"),
        ("#/live", "#chart-qps canvas"),
        ("#/", '#collections tr[data-collection="sample"]'),
    ]:
        console.open(frag)
        expect(p.locator(ready).first).to_be_attached()
    console.open("#/c/sample")
    expect(p.locator("#schema")).to_contain_text("string")
    expect(p.locator("#segments .seg").first).to_be_attached()
    expect(p.locator("#history")).to_be_attached()
    rows = p.locator("#sample tbody tr")
    expect(rows).to_have_count(20)
    first = int(rows.first.get_attribute("data-id"))
    expect(rows.first.locator(".payload")).to_contain_text(texts[first][:60])
    p.click("text=next →")
    expect(p.locator("#rows")).to_contain_text("rows 21\u201340")
    # Two more refreshes of the page's live parts, still without errors.
    polls = int(p.evaluate("document.body.dataset.polls"))
    p.wait_for_function(f"() => Number(document.body.dataset.polls) >= {polls + 2}")
    assert console.errors == []


def test_text_search_returns_the_expected_top_row(console, server, demo):
    _col, texts, _vecs = demo
    p = console.open("#/search/sample")
    console.sign_in(READER)
    target = 5  # "Geyes: pair of eyes which follow the mouse pointer around the screen."
    p.fill("#s-text", texts[target])
    p.click("#s-run")
    first = p.locator("#hits tbody tr").first
    expect(first.locator(".hit-id")).to_have_text(str(target), timeout=FIRST_EMBED_MS)
    expect(first).to_contain_text("pair of eyes")
    # Both legs are shown: dense rank and text rank of the top row.
    cells = first.locator("td")
    expect(cells.nth(3)).to_have_text("1")
    expect(cells.nth(5)).to_have_text("1")
    # The curl snippet is the request the page sent: run it for real.
    curl = p.locator("#snippet-curl").inner_text()
    assert "/collections/sample/search" in curl
    out = subprocess.run(
        ["bash", "-c", curl],
        env={**os.environ, "SAGITTA_API_KEY": READER},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["hits"][0]["id"] == target
    assert "requests.post(" in p.locator("#snippet-python").inner_text()
    # A row's vector, taken by id, searches its neighbours (itself first).
    p.fill("#s-text", "")
    p.fill("#s-like", "42")
    p.click("#s-like-button")
    expect(p.locator("#s-vector")).not_to_have_value("")
    p.click("#s-run")
    expect(p.locator("#hits tbody tr").first.locator(".hit-id")).to_have_text("42")
    assert console.errors == []


def test_filter_errors_are_shown_inline(console, demo):
    _col, texts, _vecs = demo
    p = console.open("#/search/sample")
    console.sign_in(READER)
    p.fill("#s-text", "XML parser")
    p.fill("#s-filter", '{"field": "nope", "op": "eq", "value": 1}')
    expect(p.locator("#filter-error")).to_contain_text('field "nope": no such payload field')
    p.click("#s-run")
    expect(p.locator("#filter-error")).to_contain_text("no such payload field")
    expect(p.locator("#hits")).to_have_count(0)
    p.fill("#s-filter", '{"field": "text", "op": "lol", "value": "x"}')
    expect(p.locator("#filter-error")).to_contain_text('operator "lol" is unknown')
    p.fill("#s-filter", '{"field": "text", "op": ')
    expect(p.locator("#filter-error")).to_contain_text("not JSON")
    # A valid filter: its match count, and hits that pass it.
    # A valid filter: its match count, and hits that pass it (the row
    # the text names is left out).
    p.fill("#s-text", texts[5])
    p.fill("#s-filter", json.dumps({"field": "text", "op": "ne", "value": texts[5]}))
    expect(p.locator("#filter-error")).to_have_text(f"matches {len(texts) - 1:,} rows")
    p.click("#s-run")
    expect(p.locator("#hits tbody tr")).to_have_count(10, timeout=FIRST_EMBED_MS)
    ids = [int(i) for i in p.locator("#hits .hit-id").all_inner_texts()]
    assert 5 not in ids
    p.fill("#s-filter", "")
    p.click("#s-run")
    expect(p.locator("#hits tbody tr").first.locator(".hit-id")).to_have_text("5")


def test_a_read_only_key_cannot_write(console, server, demo):
    col, _texts, vecs = demo
    before = col.count()
    p = console.open("#/")
    console.sign_in(READER)
    expect(p.locator("#who")).to_have_text("role: read")
    expect(p.locator('#collections tr[data-collection="sample"]')).to_be_visible()
    expect(p.locator("#create-button")).to_have_count(0)
    console.open("#/c/sample")
    expect(p.locator("#sample tbody tr")).to_have_count(20)
    expect(p.locator(".write")).to_have_count(0)
    expect(p.locator("#drop-button")).to_have_count(0)
    expect(p.locator("#upsert-body")).to_have_count(0)
    # Going around the page: the API refuses the key.
    status = p.evaluate(
        """async ([key, v]) => (await fetch('/collections/sample/upsert', {method: 'POST',
            headers: {'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'},
            body: JSON.stringify({ids: [777777], vectors: [v]})})).status""",
        [READER, vecs[0].tolist()],
    )
    assert status == 403
    assert col.count() == before
    # A write key sees the write buttons, not the admin ones.
    console.sign_in(WRITER)
    console.open("#/c/sample")
    expect(p.locator("#upsert-button")).to_be_visible()
    console.open("#/")
    expect(p.locator('#collections tr[data-collection="sample"]')).to_be_visible()
    expect(p.locator("#create-button")).to_have_count(0)


def test_an_admin_creates_fills_searches_and_drops_a_collection(console, server):
    p = console.open("#/")
    console.sign_in(ADMIN)
    p.fill("#new-name", "strs")
    p.fill("#new-dims", "4")
    p.select_option("#new-metric", "l2")
    p.select_option("#new-id-type", "string")
    p.fill("#new-text", "title")
    p.click("#create-button")
    expect(p.locator("h1")).to_contain_text("strs")
    rows = {
        "ids": ["a", "b", "c"],
        "vectors": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
        "payload": [{"title": "alpha"}, {"title": "beta"}, {"title": "gamma"}],
    }
    p.fill("#upsert-body", json.dumps(rows))
    p.click("#upsert-button")
    expect(p.locator("#upsert-error")).to_contain_text("upserted 3")
    expect(p.locator("#sample tbody tr")).to_have_count(3)
    expect(p.locator('#sample tr[data-id="b"]')).to_contain_text("beta")
    # A bad upsert is the server's message, and nothing is written.
    p.fill("#upsert-body", '{"ids": ["d"], "vectors": [[1, 2]]}')
    p.click("#upsert-button")
    expect(p.locator("#upsert-error")).to_contain_text("dimensions")
    # (Chromium logs the refused request: that one error is expected.)
    assert len(console.errors) == 1 and "400" in console.errors[0], console.errors
    console.errors.clear()
    # Optimize now: the three rows leave the mutable part for a segment.
    p.click("#optimize-button")
    expect(p.locator("#optimize-msg")).to_contain_text("optimized: 1 segment, 0 rows")
    parts = raw(server, "GET", "/collections/strs/segments", headers={"x-api-key": ADMIN})[2]
    assert parts["active_vectors"] == 0 and [g["rows"] for g in parts["segments"]] == [3]
    # Search like a row, by its string id.
    p.locator('#sample tr[data-id="b"] a', has_text="similar").click()
    expect(p.locator("#hits tbody tr").first.locator(".hit-id")).to_have_text("b")
    expect(p.locator("#hits tbody tr")).to_have_count(3)
    # Dropping needs the name typed.
    console.open("#/c/strs")
    p.click("#drop-button")
    expect(p.locator("#drop-error")).to_contain_text("Type the collection")
    p.fill("#drop-confirm", "strs")
    p.click("#drop-button")
    expect(p.locator("#collections")).to_be_visible()
    expect(p.locator('#collections tr[data-collection="strs"]')).to_have_count(0)
    assert raw(server, "GET", "/collections/strs", headers={"x-api-key": ADMIN})[0] == 404
    assert console.errors == []


def test_payload_html_is_text_never_markup(console, server, demo):
    _col, texts, vecs = demo
    # A small collection (every row on the first page of the rows table)
    # with markup in a payload column and in a text-indexed one.
    col = sagitta.Client(server.url, api_key=ADMIN).create_collection(
        "html", ndim=384, text_fields=["text"]
    )
    col.upsert([1, 2, 3], vecs[:3], payload={"text": [HOSTILE, texts[1], texts[2]]})
    p = console.open("#/c/html")
    console.sign_in(READER)
    row = p.locator('#sample tr[data-id="1"]')
    expect(row).to_contain_text(HOSTILE)
    assert row.locator("img, script").count() == 0
    console.open("#/search/html?like=1")
    expect(p.locator("#hits tbody tr").first.locator(".hit-id")).to_have_text("1")
    expect(p.locator("#hits tbody tr").first).to_contain_text(HOSTILE)
    p.fill("#s-text", "hostile payload")
    p.fill("#s-vector", "")
    p.click("#s-run")
    expect(p.locator("#hits tbody tr").first).to_contain_text(HOSTILE)
    assert p.locator("main img, main script").count() == 0
    assert p.evaluate("window.__xss") is None
    assert console.errors == []


def test_errors_are_messages_not_blank_pages(console, browser, server, demo, tmp_path):
    p = console.open("#/")
    # A wrong key is refused in the dialog.
    p.click("#key-button")
    p.fill("#key-input", "not-a-key-of-this-server")
    p.click("#key-save")
    expect(p.locator("#key-error")).to_contain_text("did not accept")
    p.click("#key-cancel")
    console.sign_in(READER)
    # An unknown collection.
    console.open("#/c/no-such-collection")
    expect(p.locator('main [data-error="not_found"]')).to_contain_text("no-such-collection")
    console.open("#/search/no-such-collection")
    expect(p.locator("#search-error")).to_contain_text("No collection named no-such-collection")
    # A server that goes away: a message, then recovery is not needed to
    # see it (the page stays and says so).
    with Server(tmp_path / "gone") as s:
        c2 = Console(browser, s)
        try:
            p2 = c2.open("#/live")
            expect(p2.locator("#who")).to_contain_text("no API keys")
            s.kill()
            expect(p2.locator("#banner")).to_contain_text("Cannot reach the server")
            expect(p2.locator("h1")).to_have_text("Live")
        finally:
            c2.close()


def test_charts_move_under_load(console, server, demo):
    col, _texts, vecs = demo
    p = console.open("#/live")
    console.sign_in(READER)
    p.wait_for_function("() => Number(document.querySelector('#chart-qps').dataset.points) >= 2")
    stop = threading.Event()
    done = {"search": 0, "upsert": 0}

    def load():
        c = sagitta.Client(server.url, api_key=WRITER).collection("sample")
        i = 0
        while not stop.is_set():
            c.search(vecs[i % 1000], 10)
            done["search"] += 1
            if i % 10 == 0:
                c.upsert([800000 + i], vecs[i : i + 1])
                done["upsert"] += 1
            i += 1

    t = threading.Thread(target=load)
    t.start()
    try:
        p.wait_for_function(
            "() => Number(document.querySelector('#chart-qps').dataset.last) > 5",
            timeout=30000,
        )
        p.wait_for_function(
            "() => Number(document.querySelector('#chart-ingest').dataset.last) > 0",
            timeout=30000,
        )
        expect(p.locator("#chart-latency-value")).to_contain_text("p99")
    finally:
        stop.set()
        t.join()
    assert done["search"] > 0 and done["upsert"] > 0
    col.remove([800000 + i for i in range(0, done["search"] + 10, 10)])
    assert console.errors == []


def test_console_headers_assets_and_auth(server):
    s, h, _ = raw(server, "GET", "/ui/")
    assert s == 200 and h["content-type"].startswith("text/html")
    csp = h["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY"
    s, h, _ = raw(server, "GET", "/ui")
    assert s == 308 and h["location"] == "/ui/"
    total = 0
    for f in ["app.js", "app.css", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css"]:
        conn_s, conn_h, b = raw(server, "GET", "/ui/" + f)
        assert conn_s == 200 and conn_h["x-content-type-options"] == "nosniff"
        total += len(gzip.compress(b.encode() if isinstance(b, str) else b))
    assert total < 300_000
    for bad in ["/ui/../keys", "/ui/%2e%2e/keys", "/ui/nope.js", "/ui/vendor/../app.js"]:
        assert raw(server, "GET", bad)[0] == 404, bad
    # The console's data comes from the API, which still asks for a key.
    for path in ["/whoami", "/collections", "/collections/sample/segments", "/metrics"]:
        assert raw(server, "GET", path)[0] == 401
    assert raw(server, "POST", "/collections/sample/scroll", b"{}")[0] == 401
    s, _, who = raw(server, "GET", "/whoami", headers={"authorization": f"Bearer {WRITER}"})
    assert s == 200 and who == {"role": "write", "auth": True}
