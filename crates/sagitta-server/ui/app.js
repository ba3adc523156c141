// Sagitta's web console: a page over the server's own HTTP API (the same
// routes, the same API key). Every value from the server is put into the
// page as text (textContent), never as HTML.
"use strict";

const KEY = "sagitta.apiKey";
const $ = (sel) => document.querySelector(sel);

// ---- DOM ------------------------------------------------------------------

/** el("td", {className: "num"}, "text", childNode, ...) */
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null) continue;
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "style") Object.assign(e.style, v);
    else e[k] = v;
  }
  for (const c of kids.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function fmtInt(n) {
  return n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US");
}

function fmtBytes(b) {
  if (b === undefined || b === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(b);
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v : v.toFixed(1)) + " " + u[i];
}

function fmtTime(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "–";
}

function bar(frac) {
  const f = Math.max(0, Math.min(1, Number(frac) || 0));
  return el("span", { className: "bar", title: (f * 100).toFixed(0) + " %" },
    el("span", { style: { width: (f * 100).toFixed(1) + "%" } }));
}

// ---- API ------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

function setBanner(text, kind) {
  const b = $("#banner");
  if (!text) {
    b.hidden = true;
    b.textContent = "";
    return;
  }
  b.hidden = false;
  b.className = "banner" + (kind ? " " + kind : "");
  b.textContent = text;
}

let offline = false;

/** Calls the API; resolves to the parsed JSON (or text), rejects with ApiError. */
async function api(method, path, body) {
  const headers = {};
  const key = apiKey();
  if (key) headers.Authorization = "Bearer " + key;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let r;
  try {
    r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (e) {
    offline = true;
    setBanner("Cannot reach the server (" + e.message + "). Is `sagitta serve` still running? Retrying…");
    throw new ApiError(0, "network", "Cannot reach the server: " + e.message);
  }
  if (offline) {
    offline = false;
    setBanner("");
  }
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  if (!r.ok) {
    const code = (json && json.error && json.error.code) || "http_" + r.status;
    const msg = (json && json.error && json.error.message) || text || r.statusText;
    if (r.status === 401) {
      setBanner(apiKey()
        ? "The server refused this API key (" + msg + "). Enter another one with the API key button."
        : "This server needs an API key: enter it with the API key button.");
    }
    throw new ApiError(r.status, code, msg);
  }
  return json === null ? text : json;
}

// ---- who am I --------------------------------------------------------------

let role = null; // "read" | "write" | "admin" | null (unknown)
let needKey = false; // the server refused the request for want of a key

async function refreshRole() {
  try {
    const w = await api("GET", "/whoami");
    role = w.role;
    $("#who").textContent = w.auth ? "role: " + w.role : "no API keys configured (loopback)";
  } catch (e) {
    role = null;
    needKey = e.status === 401;
    $("#who").textContent = needKey ? "no API key" : "";
    return;
  }
  needKey = false;
  document.body.dataset.role = role || "none";
}

const canWrite = () => role === "write" || role === "admin";
const isAdmin = () => role === "admin";

function openKeyDialog() {
  const d = $("#key-dialog");
  $("#key-input").value = apiKey();
  $("#key-error").hidden = true;
  d.showModal();
}

function setupKeyDialog() {
  $("#key-button").addEventListener("click", openKeyDialog);
  $("#key-cancel").addEventListener("click", () => $("#key-dialog").close());
  $("#key-clear").addEventListener("click", async () => {
    sessionStorage.removeItem(KEY);
    $("#key-dialog").close();
    await refreshRole();
    route();
  });
  $("#key-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const k = $("#key-input").value.trim();
    const before = apiKey();
    if (k) sessionStorage.setItem(KEY, k);
    else sessionStorage.removeItem(KEY);
    await refreshRole();
    if (role === null) {
      $("#key-error").hidden = false;
      $("#key-error").textContent = "The server did not accept this key.";
      if (before) sessionStorage.setItem(KEY, before);
      else sessionStorage.removeItem(KEY);
      await refreshRole();
      return;
    }
    setBanner("");
    $("#key-dialog").close();
    route();
  });
}

// ---- pages ----------------------------------------------------------------

let timers = [];
let charts = [];

let polls = 0;

/** Runs `f` now and every `ms` while the page is shown; counts the runs
 * done in body[data-polls] (tests wait on it). */
function every(ms, f) {
  const tick = async () => {
    await f();
    document.body.dataset.polls = String(++polls);
  };
  tick();
  timers.push(setInterval(tick, ms));
}

function clearPage() {
  timers.forEach(clearInterval);
  timers = [];
  charts.forEach((c) => c.destroy());
  charts = [];
}

function show(...nodes) {
  const m = $("#main");
  m.replaceChildren(...nodes);
}

function errorBox(e) {
  return el("p", { className: "error", dataset: { error: e.code || "" } }, e.message);
}

function indexPill(ix) {
  if (!ix) return el("span", { className: "pill" }, "–");
  if (ix.optimizer_errors > 0 && ix.optimizer_last_error) {
    return el("span", { className: "pill bad", title: ix.optimizer_last_error }, "errors: " + ix.optimizer_errors);
  }
  if (ix.state === "building") return el("span", { className: "pill busy" }, "ingesting");
  if (ix.optimizer_task) return el("span", { className: "pill busy" }, ix.optimizer_task);
  return el("span", { className: "pill ok" }, ix.state);
}

function optimizerCell(ix) {
  if (!ix || !ix.optimizer_task) {
    return el("span", {}, bar(ix ? ix.indexed : 0), " " + ((ix ? ix.indexed : 0) * 100).toFixed(0) + " % indexed");
  }
  const [done, total] = ix.optimizer_task_rows || [0, 0];
  const f = total ? done / total : 0;
  return el("span", {}, bar(f), " " + ix.optimizer_task + " " + fmtInt(done) + " / " + fmtInt(total));
}

// Collections -------------------------------------------------------------

function pageCollections() {
  const body = el("tbody");
  const err = el("div");
  const create = el("div");
  const summary = el("p", { className: "muted" });
  show(
    el("h1", {}, "Collections"),
    summary,
    err,
    el("table", { id: "collections" },
      el("thead", {}, el("tr", {},
        el("th", {}, "name"), el("th", { className: "num" }, "rows"), el("th", { className: "num" }, "segments"),
        el("th", { className: "num" }, "tombstones"), el("th", { className: "num" }, "disk"),
        el("th", {}, "dims · metric · kind"), el("th", {}, "index"), el("th", {}, "optimizer"), el("th", {}, ""))),
      body),
    create,
  );
  if (isAdmin()) create.replaceChildren(createForm());
  every(2000, async () => {
    try {
      const r = await api("GET", "/collections");
      err.replaceChildren();
      const cs = r.collections;
      summary.textContent = cs.length + " collection" + (cs.length === 1 ? "" : "s") + ", " +
        fmtInt(cs.reduce((a, c) => a + c.vectors, 0)) + " rows, " +
        fmtBytes(cs.reduce((a, c) => a + c.disk_bytes, 0)) + " on disk · refreshed " + new Date().toLocaleTimeString();
      body.replaceChildren(...cs.map((c) => el("tr", { dataset: { collection: c.name } },
        el("td", {}, el("a", { href: "#/c/" + encodeURIComponent(c.name) }, c.name)),
        el("td", { className: "num" }, fmtInt(c.vectors)),
        el("td", { className: "num" }, fmtInt(c.index.segments)),
        el("td", { className: "num" }, fmtInt(c.tombstones)),
        el("td", { className: "num" }, fmtBytes(c.disk_bytes)),
        el("td", {}, c.dims + " · " + c.metric + " · " + c.kind),
        el("td", {}, indexPill(c.index)),
        el("td", {}, optimizerCell(c.index)),
        el("td", {}, el("a", { href: "#/search/" + encodeURIComponent(c.name) }, "search")),
      )));
      if (!cs.length) body.replaceChildren(el("tr", {}, el("td", { colSpan: 9, className: "muted" }, "No collections yet.")));
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  });
}

function createForm() {
  const name = el("input", { id: "new-name", placeholder: "name", required: true });
  const dims = el("input", { id: "new-dims", type: "number", min: 1, value: 384, style: { width: "90px" } });
  const metric = el("select", { id: "new-metric" }, ["cos", "l2", "ip", "hamming", "nphd"].map((m) => el("option", { value: m }, m)));
  const text = el("input", { id: "new-text", placeholder: "text fields, comma separated" });
  const idType = el("select", { id: "new-id-type" }, ["uint64", "int64", "string", "uint128"].map((t) => el("option", { value: t }, t)));
  const msg = el("p", { className: "error", id: "create-error" });
  const go = el("button", {
    className: "primary write admin", type: "button", id: "create-button",
    onclick: async () => {
      msg.textContent = "";
      const body = { name: name.value.trim(), dims: Number(dims.value), metric: metric.value, id_type: idType.value };
      const tf = text.value.split(",").map((s) => s.trim()).filter(Boolean);
      if (tf.length) body.text_fields = tf;
      try {
        await api("POST", "/collections", body);
        location.hash = "#/c/" + encodeURIComponent(body.name);
      } catch (e) {
        msg.textContent = e.message;
      }
    },
  }, "Create");
  return el("div", { className: "card" }, el("h2", {}, "New collection"),
    el("div", { className: "row" },
      el("div", {}, el("label", {}, "name"), name), el("div", {}, el("label", {}, "dims"), dims),
      el("div", {}, el("label", {}, "metric"), metric), el("div", {}, el("label", {}, "id type"), idType),
      el("div", {}, el("label", {}, "text fields"), text), go),
    msg);
}

// One collection --------------------------------------------------------------

function kvList(pairs) {
  return el("dl", { className: "kv" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

function payloadCell(p) {
  if (!p) return el("span", { className: "muted" }, "–");
  return el("div", { className: "payload" }, Object.entries(p).map(([k, v]) => {
    let s = typeof v === "string" ? v : JSON.stringify(v);
    const full = s;
    if (s.length > 300) s = s.slice(0, 300) + "…";
    return el("div", { title: full.length > 300 ? full : undefined }, el("span", { className: "field" }, k + ":"), el("span", { className: "value" }, s));
  }));
}

function pageCollection(name) {
  const head = el("div");
  const settings = el("div", { className: "card" }, el("p", { className: "muted" }, "Loading…"));
  const status = el("div", { className: "card" });
  const segs = el("div", { className: "card", id: "segments" });
  const rows = el("div", { className: "card", id: "rows" });
  show(head, el("div", { className: "grid2" }, settings, status), segs, rows);
  head.replaceChildren(el("h1", {}, "Collection ", el("code", {}, name)),
    el("p", {}, el("a", { href: "#/search/" + encodeURIComponent(name) }, "Search this collection →")));
  if (isAdmin()) {
    // Dropping deletes the files: the name must be typed to confirm.
    const confirmName = el("input", { id: "drop-confirm", placeholder: "type " + name + " to drop it" });
    const dropMsg = el("span", { className: "error", id: "drop-error" });
    const drop = el("button", {
      className: "danger write admin", type: "button", id: "drop-button",
      onclick: async () => {
        if (confirmName.value !== name) {
          dropMsg.textContent = "Type the collection's name to confirm.";
          return;
        }
        try {
          await api("DELETE", "/collections/" + encodeURIComponent(name));
          location.hash = "#/";
        } catch (e) {
          dropMsg.textContent = e.message;
        }
      },
    }, "Drop collection");
    head.append(el("div", { className: "row" }, confirmName, drop, dropMsg));
  }
  if (canWrite()) {
    // POST .../optimize: seal, then wait for the optimizer (the page's
    // status refreshes on its own meanwhile).
    const optMsg = el("span", { className: "muted", id: "optimize-msg" });
    const opt = el("button", {
      className: "write", type: "button", id: "optimize-button",
      title: "Write the mutable part as a segment and wait until everything written so far is indexed and merged",
      onclick: async () => {
        opt.disabled = true;
        optMsg.textContent = "optimizing…";
        try {
          const ix = await api("POST", "/collections/" + encodeURIComponent(name) + "/optimize", {});
          optMsg.textContent = "optimized: " + fmtInt(ix.segments) + " segment" + (ix.segments === 1 ? "" : "s") +
            ", " + fmtInt(ix.unindexed_vectors) + " rows waiting for an index";
        } catch (e) {
          optMsg.textContent = e.message;
        } finally {
          opt.disabled = false;
        }
      },
    }, "Optimize now");
    head.append(el("div", { className: "row" }, opt, optMsg));
  }

  api("GET", "/collections/" + encodeURIComponent(name)).then((c) => {
    settings.replaceChildren(el("h2", {}, "Settings"), kvList([
      ["dims", c.dims], ["metric", c.metric], ["dtype", c.dtype], ["index kind", c.kind],
      ["graph codes", c.codes || "none"], ["id type", c.id_type], ["durability", c.durability],
      ["segment size", fmtBytes(c.segment_size)], ["index threshold", fmtInt(c.index_threshold) + " rows"],
      ["text fields", (c.text_fields || []).map((t) => t.name + " (" + t.analyzer + ")").join(", ") || "none"],
      ["embedding model", c.embed_model || "none"],
    ]), el("h2", {}, "Payload schema"),
    c.schema.length ? el("table", { id: "schema" }, el("thead", {}, el("tr", {}, el("th", {}, "field"), el("th", {}, "type"))),
      el("tbody", {}, c.schema.map((f) => el("tr", {}, el("td", {}, f.name), el("td", {}, f.type)))))
      : el("p", { className: "muted" }, "No payload columns."));
  }).catch((e) => {
    head.replaceChildren(el("h1", {}, "Collection ", el("code", {}, name)), errorBox(e),
      el("p", {}, el("a", { href: "#/" }, "← all collections")));
    settings.remove();
    status.remove();
    segs.remove();
    rows.remove();
    clearPage();
  });

  every(2000, async () => {
    if (!segs.isConnected) return;
    try {
      const [c, s] = await Promise.all([
        api("GET", "/collections/" + encodeURIComponent(name)),
        api("GET", "/collections/" + encodeURIComponent(name) + "/segments"),
      ]);
      const ix = c.index;
      status.replaceChildren(el("h2", {}, "Status"), kvList([
        ["rows", fmtInt(c.vectors)], ["tombstones", fmtInt(c.tombstones)], ["disk", fmtBytes(c.disk_bytes)],
        ["write-ahead log", fmtBytes(s.wal_bytes)], ["mutable part", fmtInt(s.active_vectors) + " rows"],
        ["segments", fmtInt(s.segments.length)], ["index", indexPill(ix)], ["optimizer", optimizerCell(ix)],
        ["seals (flushes)", fmtInt(s.optimizer.flushes)], ["tasks done", fmtInt(s.optimizer.tasks_done)],
        ["rows indexed", fmtInt(s.optimizer.rows_indexed)],
        ["optimizer errors", s.optimizer.errors ? fmtInt(s.optimizer.errors) + ": " + (s.optimizer.last_error || "") : "0"],
      ]));
      const maxRows = Math.max(1, ...s.segments.map((g) => g.rows));
      const timeline = el("div", { className: "timeline" }, s.segments.map((g) => {
        const h = 12 + 78 * Math.sqrt(g.rows / maxRows);
        const cls = "seg" + (g.file ? (g.indexed ? "" : " flat") : " frozen");
        const title = "#" + g.id + (g.file ? " " + g.file : " (frozen, in memory)") + "\n" + fmtInt(g.rows) + " rows, " +
          fmtInt(g.live) + " live, " + fmtInt(g.tombstones) + " tombstones\n" + g.kind + (g.indexed ? " (indexed)" : " (exact scan)") +
          "\n" + fmtBytes(g.file_bytes || g.memory_bytes) + ", written " + fmtTime(g.written_ms);
        return el("div", { className: cls, title, style: { height: h + "px", flex: "0 0 " + Math.max(10, 80 * g.rows / maxRows).toFixed(0) + "px" } },
          el("div", { className: "dead", style: { height: (100 * g.tombstones / Math.max(1, g.rows)).toFixed(1) + "%" } }));
      }));
      segs.replaceChildren(el("h2", {}, "Segments"),
        el("p", { className: "muted" }, "Oldest to newest (by id); height ∝ √rows; dark: indexed, light: exact scan, orange: frozen (being written); hatched: tombstones."),
        timeline,
        el("table", {}, el("thead", {}, el("tr", {},
          el("th", { className: "num" }, "id"), el("th", {}, "written"), el("th", { className: "num" }, "rows"),
          el("th", { className: "num" }, "live"), el("th", { className: "num" }, "tombstones"), el("th", {}, "index"),
          el("th", { className: "num" }, "bytes"))),
        el("tbody", {}, s.segments.slice().reverse().slice(0, 25).map((g) => el("tr", {},
          el("td", { className: "num" }, "#" + g.id), el("td", {}, g.file ? fmtTime(g.written_ms) : "in memory"),
          el("td", { className: "num" }, fmtInt(g.rows)), el("td", { className: "num" }, fmtInt(g.live)),
          el("td", { className: "num" }, fmtInt(g.tombstones)), el("td", {}, g.kind + (g.indexed ? "" : " (exact)")),
          el("td", { className: "num" }, fmtBytes(g.file_bytes || g.memory_bytes)))),
        s.segments.length > 25 ? el("tr", {}, el("td", { colSpan: 7, className: "muted" },
          "… and " + (s.segments.length - 25) + " older segments")) : null)),
        el("h2", {}, "Seals, builds and merges"), historyView(s.history));
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  sampleRows(name, rows);
}

const KIND_COLOR = { seal: "#e0772f", build: "#2f6fdf", merge: "#7b4fd6", compact: "#c93a3a" };

/** The part list's changes since open: on a time axis, then newest first. */
function historyView(h) {
  if (!h.length) {
    return el("p", { className: "muted", id: "history" }, "No seal, build or merge since the collection was opened.");
  }
  const t0 = h[0].at_ms;
  const t1 = Math.max(h[h.length - 1].at_ms, t0 + 1000);
  // A seal writes a frozen part as a file under the same id.
  const label = (e) => e.what + " " +
    (e.inputs.length && !(e.what === "seal" && e.inputs[0] === e.output) ? "#" + e.inputs.join(" #") + " → " : "") +
    (e.output !== undefined ? "#" + e.output + " (" + fmtInt(e.rows) + " rows)" : "nothing left");
  const axis = el("div", { className: "axis" }, h.map((e) => el("span", {
    className: "mark", title: fmtTime(e.at_ms) + "  " + label(e),
    style: { left: (100 * (e.at_ms - t0) / (t1 - t0)).toFixed(2) + "%", background: KIND_COLOR[e.what] || "#67717e" },
  })));
  const legend = el("div", { className: "muted legend" }, Object.entries(KIND_COLOR).map(([k, c]) =>
    el("span", {}, el("span", { className: "mark", style: { background: c, position: "static", display: "inline-block" } }), " " + k)),
  " · " + fmtTime(t0) + " – " + fmtTime(t1));
  return el("div", { id: "history" }, axis, legend,
    el("div", { className: "events" }, h.slice().reverse().map((e) =>
      el("div", { dataset: { what: e.what } }, fmtTime(e.at_ms) + "  " + label(e)))));
}

async function sampleRows(name, box) {
  const msg = el("p", { className: "error" });
  const body = el("tbody");
  let offset = 0;
  const load = async () => {
    try {
      const r = await api("POST", "/collections/" + encodeURIComponent(name) + "/scroll", { limit: 20, offset });
      msg.textContent = "";
      body.replaceChildren(...r.items.map((it) => el("tr", { dataset: { id: String(it.id) } },
        el("td", { className: "num" }, String(it.id)),
        el("td", {}, payloadCell(it.payload)),
        el("td", {},
          el("a", { href: "#/search/" + encodeURIComponent(name) + "?like=" + encodeURIComponent(String(it.id)) }, "similar"),
          canWrite() ? el("button", {
            className: "danger write", type: "button", style: { marginLeft: "8px" },
            onclick: async () => {
              try {
                await api("POST", "/collections/" + encodeURIComponent(name) + "/delete", { ids: [it.id] });
                load();
              } catch (e) {
                msg.textContent = e.message;
              }
            },
          }, "delete") : null))));
      if (!r.items.length) body.replaceChildren(el("tr", {}, el("td", { colSpan: 3, className: "muted" }, "No rows.")));
      next.disabled = r.next_offset === undefined;
      prev.disabled = offset === 0;
      where.textContent = r.items.length ? "rows " + (offset + 1) + "–" + (offset + r.items.length) : "";
    } catch (e) {
      msg.textContent = e.message;
    }
  };
  const prev = el("button", { type: "button", onclick: () => { offset = Math.max(0, offset - 20); load(); } }, "← previous");
  const next = el("button", { type: "button", onclick: () => { offset += 20; load(); } }, "next →");
  const where = el("span", { className: "muted" });
  box.replaceChildren(el("h2", {}, "Rows"), el("div", { className: "row" }, prev, next, where), msg,
    el("table", { id: "sample" }, el("thead", {}, el("tr", {}, el("th", { className: "num" }, "id"), el("th", {}, "payload"), el("th", {}, ""))), body));
  if (canWrite()) box.append(upsertForm(name, load));
  load();
}

function upsertForm(name, after) {
  const ta = el("textarea", { rows: 4, id: "upsert-body", placeholder: '{"ids": [1], "vectors": [[...]], "payload": [{"text": "..."}]}' });
  const msg = el("p", { className: "error", id: "upsert-error" });
  return el("div", {}, el("h2", {}, "Upsert rows"), el("p", { className: "muted" }, "A body as POST /collections/{name}/upsert takes."), ta,
    el("div", { className: "row" }, el("button", {
      className: "primary write", type: "button", id: "upsert-button",
      onclick: async () => {
        msg.textContent = "";
        let body;
        try {
          body = JSON.parse(ta.value);
        } catch (e) {
          msg.textContent = "Not JSON: " + e.message;
          return;
        }
        try {
          const r = await api("POST", "/collections/" + encodeURIComponent(name) + "/upsert", body);
          msg.textContent = "";
          msg.append(el("span", { className: "muted" }, "upserted " + r.upserted));
          after();
        } catch (e) {
          msg.textContent = e.message;
        }
      },
    }, "Upsert")), msg);
}

// Search playground -----------------------------------------------------------

/** A JSON value written as a Python literal. */
function pyLiteral(v) {
  if (v === null || v === undefined) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "number" || typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(pyLiteral).join(", ") + "]";
  return "{" + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ": " + pyLiteral(x)).join(", ") + "}";
}

function pageSearch(name, params) {
  const coll = el("select", { id: "s-collection" });
  const text = el("input", { id: "s-text", placeholder: "text query (BM25, fused with the embedded text when the collection has a model)", style: { width: "100%" } });
  const vector = el("textarea", { id: "s-vector", rows: 2, placeholder: "[0.1, 0.2, …] (optional with a text query)" });
  const likeId = el("input", { id: "s-like", placeholder: "row id", style: { width: "120px" } });
  const likeMsg = el("span", { className: "error", id: "s-like-error" });
  const filter = el("textarea", { id: "s-filter", rows: 3, placeholder: '{"and": [{"field": "lang", "op": "eq", "value": "en"}, {"field": "year", "op": ">=", "value": 2020}]}' });
  const filterErr = el("p", { className: "error", id: "filter-error" });
  const fusion = el("select", { id: "s-fusion" }, ["alpha", "rrf", "dbsf"].map((f) => el("option", { value: f }, f)));
  const alpha = el("input", { id: "s-alpha", type: "number", min: 0, max: 1, step: 0.05, placeholder: "0.3", style: { width: "80px" } });
  const k = el("input", { id: "s-k", type: "number", min: 1, max: 10000, value: 10, style: { width: "80px" } });
  const ef = el("input", { id: "s-ef", type: "number", min: 1, placeholder: "default", style: { width: "90px" } });
  const exact = el("input", { id: "s-exact", type: "checkbox" });
  const err = el("div", { id: "search-error" });
  const results = el("div", { id: "results" });
  const snippets = el("div", { id: "snippets" });

  const request = () => {
    const body = { k: Number(k.value) || 10, include_payload: true };
    if (text.value.trim()) body.text = text.value.trim();
    if (vector.value.trim()) body.vector = JSON.parse(vector.value);
    if (filter.value.trim()) body.filter = JSON.parse(filter.value);
    if (body.text) {
      // `alpha` fusion is the default; its weight alone selects it.
      if (fusion.value !== "alpha") body.fusion = fusion.value;
      else if (alpha.value !== "") body.alpha = Number(alpha.value);
    }
    if (ef.value) body.ef = Number(ef.value);
    if (exact.checked) body.exact = true;
    return body;
  };

  // Checks the filter with the server (a count with it): shows the error
  // under the field, or how many rows it matches. False when refused.
  let filterSeq = 0;
  const checkFilter = async () => {
    const seq = ++filterSeq;
    const raw = filter.value.trim();
    filterErr.className = "error";
    if (!raw) {
      filterErr.textContent = "";
      return true;
    }
    let f;
    try {
      f = JSON.parse(raw);
    } catch (e) {
      filterErr.textContent = "The filter is not JSON: " + e.message;
      return false;
    }
    try {
      const r = await api("POST", "/collections/" + encodeURIComponent(coll.value) + "/count", { filter: f });
      if (seq === filterSeq) {
        filterErr.className = "muted";
        filterErr.textContent = "matches " + fmtInt(r.count) + " rows";
      }
      return true;
    } catch (e) {
      if (seq === filterSeq) filterErr.textContent = e.message;
      return e.status !== 400;
    }
  };
  let filterTimer = null;
  filter.addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(checkFilter, 400);
  });

  const run = async () => {
    err.replaceChildren();
    let body;
    try {
      JSON.parse(filter.value.trim() || "null");
    } catch (e) {
      filterErr.className = "error";
      filterErr.textContent = "The filter is not JSON: " + e.message;
      return;
    }
    try {
      body = request();
    } catch (e) {
      err.replaceChildren(errorBox({ message: "The vector is not a JSON array of numbers: " + e.message }));
      return;
    }
    if (!body.text && !body.vector) {
      err.replaceChildren(errorBox({ message: "Give a text query, a vector, or a row id to search like." }));
      return;
    }
    const path = "/collections/" + encodeURIComponent(coll.value) + "/search";
    showSnippets(path, body);
    const t0 = performance.now();
    try {
      const r = await api("POST", path, body);
      renderHits(r.hits, performance.now() - t0);
    } catch (e) {
      results.replaceChildren();
      // A filter the server refuses is shown under the filter.
      if (body.filter && e.status === 400 && (await checkFilter()) === false) return;
      err.replaceChildren(errorBox(e));
    }
  };

  const renderHits = (hits, ms) => {
    const hybrid = hits.some((h) => h.text_rank !== undefined || h.dense_rank !== undefined);
    results.replaceChildren(
      el("p", { className: "muted" }, hits.length + " hits in " + ms.toFixed(1) + " ms (round trip)"),
      el("table", { id: "hits" }, el("thead", {}, el("tr", {},
        el("th", { className: "num" }, "#"), el("th", { className: "num" }, "id"), el("th", { className: "num" }, hybrid ? "fused" : "distance"),
        hybrid ? [el("th", { className: "num" }, "dense rank"), el("th", { className: "num" }, "dense dist."),
          el("th", { className: "num" }, "text rank"), el("th", { className: "num" }, "BM25")] : [],
        el("th", {}, "payload"))),
      el("tbody", {}, hits.map((h, i) => el("tr", { dataset: { id: String(h.id) } },
        el("td", { className: "num" }, i + 1), el("td", { className: "num hit-id" }, String(h.id)),
        el("td", { className: "num" }, Number(h.score).toFixed(4)),
        hybrid ? [el("td", { className: "num" }, h.dense_rank ?? "–"),
          el("td", { className: "num" }, h.dense_distance === undefined ? "–" : Number(h.dense_distance).toFixed(4)),
          el("td", { className: "num" }, h.text_rank ?? "–"),
          el("td", { className: "num" }, h.text_score === undefined ? "–" : Number(h.text_score).toFixed(3))] : [],
        el("td", {}, payloadCell(h.payload)))))));
  };

  const showSnippets = (path, body) => {
    const url = location.origin + path;
    const json = JSON.stringify(body);
    const auth = apiKey() ? ' -H "Authorization: Bearer $SAGITTA_API_KEY"' : "";
    const curl = "curl -s " + url + " -H 'Content-Type: application/json'" + auth + " \\\n  -d '" + json.replace(/'/g, "'\\''") + "'";
    const py = "import os, requests\n\nr = requests.post(\n    " + JSON.stringify(url) + ",\n    json=" + pyLiteral(body) + "," +
      (apiKey() ? "\n    headers={\"Authorization\": \"Bearer \" + os.environ[\"SAGITTA_API_KEY\"]}," : "") +
      "\n)\nr.raise_for_status()\nfor hit in r.json()[\"hits\"]:\n    print(hit[\"id\"], hit[\"score\"], hit.get(\"payload\"))";
    const block = (title, code, id) => el("div", {}, el("div", { className: "row" }, el("h2", {}, title),
      el("button", { type: "button", onclick: () => navigator.clipboard && navigator.clipboard.writeText(code) }, "copy")),
    el("pre", { className: "snippet", id }, code));
    snippets.replaceChildren(el("div", { className: "grid2" }, block("curl", curl, "snippet-curl"), block("Python", py, "snippet-python")));
  };

  const idTypes = new Map();
  const like = async () => {
    likeMsg.textContent = "";
    const raw = likeId.value.trim();
    if (!raw) return;
    // Integer ids go as JSON numbers; string and 128-bit ids as strings.
    const textual = ["string", "uint128"].includes(idTypes.get(coll.value));
    const id = !textual && /^-?\d+$/.test(raw) && Math.abs(Number(raw)) < Number.MAX_SAFE_INTEGER ? Number(raw) : raw;
    try {
      const r = await api("POST", "/collections/" + encodeURIComponent(coll.value) + "/get", { ids: [id], include_vectors: true });
      if (!r.items.length) {
        likeMsg.textContent = "No row with id " + raw + ".";
        return;
      }
      vector.value = JSON.stringify(r.items[0].vector.map((x) => Number(x.toFixed(6))));
    } catch (e) {
      likeMsg.textContent = e.message;
    }
  };

  const form = el("form", { className: "card", id: "search-form", onsubmit: (ev) => { ev.preventDefault(); run(); } },
    el("div", { className: "row" }, el("div", {}, el("label", {}, "collection"), coll),
      el("div", { style: { flex: "1" } }, el("label", {}, "text"), text)),
    el("label", {}, "vector"), vector,
    el("div", { className: "row" }, el("div", {}, el("label", {}, "or the vector of row"), likeId),
      el("button", { type: "button", id: "s-like-button", onclick: like }, "use its vector"), likeMsg),
    el("label", {}, "filter (the API's filter language, see docs/API.md)"), filter, filterErr,
    el("div", { className: "row" },
      el("div", {}, el("label", {}, "fusion"), fusion), el("div", {}, el("label", {}, "alpha (dense weight)"), alpha),
      el("div", {}, el("label", {}, "k"), k), el("div", {}, el("label", {}, "ef"), ef),
      el("div", {}, el("label", {}, "exact"), exact),
      el("button", { className: "primary", type: "submit", id: "s-run" }, "Search")));
  show(el("h1", {}, "Search"), form, err, results, snippets);

  api("GET", "/collections").then(async (r) => {
    coll.replaceChildren(...r.collections.map((c) => el("option", { value: c.name }, c.name)));
    r.collections.forEach((c) => idTypes.set(c.name, c.id_type));
    if (!r.collections.length) {
      err.replaceChildren(errorBox({ message: "No collections to search yet." }));
      return;
    }
    if (name) {
      if (!r.collections.some((c) => c.name === name)) {
        err.replaceChildren(errorBox({ code: "not_found", message: "No collection named " + name + "." }));
        return;
      }
      coll.value = name;
    }
    if (params.get("like")) {
      likeId.value = params.get("like");
      await like();
      if (vector.value) run();
    }
  }).catch((e) => err.replaceChildren(errorBox(e)));
}

// Live metrics -------------------------------------------------------------------

/** Parses the Prometheus text format into [{name, labels, value}]. */
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const p of m[3].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]] = p[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

/** Requests that users made (not the console's own polling). */
function counted(l) {
  const r = l.route || "";
  return !(r === "/metrics" || r === "/whoami" || r === "/health" || r === "/ready" || r.startsWith("/ui") ||
    r === "/collections" || r === "/collections/{name}" || r === "/collections/{name}/segments" || r === "/collections/{name}/index");
}

/** Summed counters and histogram buckets of one scrape. */
function summarize(ms) {
  let requests = 0;
  let ingest = 0;
  const buckets = new Map();
  for (const m of ms) {
    if (m.name === "sagitta_requests_total" && counted(m.labels)) requests += m.value;
    else if (m.name === "sagitta_ingest_rows_total") ingest += m.value;
    else if (m.name === "sagitta_request_duration_seconds_bucket" && counted(m.labels)) {
      const le = m.labels.le === "+Inf" ? Infinity : Number(m.labels.le);
      buckets.set(le, (buckets.get(le) || 0) + m.value);
    }
  }
  return { requests, ingest, buckets };
}

/** The q-quantile (seconds) of the requests between two cumulative histograms. */
function quantile(prev, cur, q) {
  const les = [...cur.keys()].sort((a, b) => a - b);
  const d = les.map((le) => (cur.get(le) || 0) - ((prev && prev.get(le)) || 0));
  const total = d[d.length - 1] || 0;
  if (total <= 0) return null;
  const want = q * total;
  for (let i = 0; i < les.length; i++) {
    if (d[i] >= want) {
      const lo = i === 0 ? 0 : les[i - 1];
      const hi = les[i] === Infinity ? lo * 2 || 1 : les[i];
      const below = i === 0 ? 0 : d[i - 1];
      const inBucket = d[i] - below;
      return lo + (hi - lo) * (inBucket > 0 ? (want - below) / inBucket : 1);
    }
  }
  return les.length > 1 ? les[les.length - 2] : null;
}

const WINDOW = 120; // seconds shown
const live = { t: [], qps: [], p50: [], p99: [], ingest: [], last: null };

function sample(now, s) {
  const p = live.last;
  live.last = { now, ...s };
  if (!p) return;
  const dt = (now - p.now) / 1000;
  if (dt <= 0) return;
  live.t.push(now / 1000);
  live.qps.push(Math.max(0, (s.requests - p.requests) / dt));
  const q50 = quantile(p.buckets, s.buckets, 0.5);
  const q99 = quantile(p.buckets, s.buckets, 0.99);
  live.p50.push(q50 === null ? null : q50 * 1000);
  live.p99.push(q99 === null ? null : q99 * 1000);
  live.ingest.push(Math.max(0, (s.ingest - p.ingest) / dt));
  while (live.t.length && live.t[0] < now / 1000 - WINDOW) {
    for (const k of ["t", "qps", "p50", "p99", "ingest"]) live[k].shift();
  }
}

/** A live chart: its box now, its uPlot once the box is in the page
 * (`mount`, sized to the box). */
function chart(title, id, series, unit) {
  const box = el("div", { className: "chart", id });
  const value = el("span", { className: "big", id: id + "-value" }, "–");
  box.append(el("h3", {}, title, " "), value);
  const c = { box, value, plot: null };
  c.mount = () => {
    if (!window.uPlot) {
      box.append(el("p", { className: "error" }, "The chart library did not load."));
      return;
    }
    const opts = {
      width: Math.max(240, box.clientWidth - 18), height: 220,
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(hi * 1.1, 1e-3)] } },
      axes: [{}, { values: (u, v) => v.map((x) => x + unit), size: 60 }],
      series: [{}, ...series],
      legend: { live: false },
    };
    c.plot = new uPlot(opts, [[], ...series.map(() => [])], box);
    charts.push(c.plot);
  };
  return c;
}

function pageLive() {
  const err = el("div");
  const qps = chart("Requests per second", "chart-qps", [{ label: "QPS", stroke: "#2f6fdf", width: 2 }], "");
  const lat = chart("Latency (ms)", "chart-latency", [
    { label: "p50", stroke: "#2f9e5b", width: 2 }, { label: "p99", stroke: "#c93a3a", width: 2 }], " ms");
  const ing = chart("Ingest (rows per second)", "chart-ingest", [{ label: "rows/s", stroke: "#e0772f", width: 2 }], "");
  show(el("h1", {}, "Live"),
    el("p", { className: "muted" }, "From the server's /metrics, sampled every second, over the last " + WINDOW +
      " s: requests to collections (searches, gets, writes, counts) over HTTP and Flight; the console's own polling is left out."),
    err, el("div", { className: "grid2" }, qps.box, lat.box, ing.box));
  [qps, lat, ing].forEach((c) => c.mount());
  const last = (a) => (a.length ? a[a.length - 1] : null);
  every(1000, async () => {
    try {
      const text = await api("GET", "/metrics");
      err.replaceChildren();
      sample(Date.now(), summarize(parseMetrics(text)));
    } catch (e) {
      err.replaceChildren(errorBox(e));
      return;
    }
    const q = last(live.qps);
    const p50 = last(live.p50);
    const p99 = last(live.p99);
    const ir = last(live.ingest);
    qps.value.textContent = q === null ? "–" : q.toFixed(1);
    qps.box.dataset.points = String(live.t.length);
    qps.box.dataset.last = q === null ? "" : String(q);
    lat.value.textContent = p50 === null ? "–" : "p50 " + p50.toFixed(2) + " · p99 " + p99.toFixed(2);
    ing.value.textContent = ir === null ? "–" : ir.toFixed(0);
    ing.box.dataset.last = ir === null ? "" : String(ir);
    if (qps.plot) qps.plot.setData([live.t, live.qps]);
    if (lat.plot) lat.plot.setData([live.t, live.p50, live.p99]);
    if (ing.plot) ing.plot.setData([live.t, live.ingest]);
  });
}

// ---- router ---------------------------------------------------------------

function route() {
  clearPage();
  if (needKey) {
    // Nothing to show without a key: ask for one (and poll nothing).
    show(el("h1", {}, "Sign in"), el("div", { className: "card", id: "sign-in" },
      el("p", {}, "This server checks API keys. Enter a key (read-only keys see everything but cannot write)."),
      el("button", { className: "primary", type: "button", onclick: openKeyDialog }, "Enter API key")));
    return;
  }
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, query] = h.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let nav = "collections";
  if (parts[0] === "c" && parts[1]) pageCollection(parts[1]);
  else if (parts[0] === "search") {
    nav = "search";
    pageSearch(parts[1], params);
  } else if (parts[0] === "live") {
    nav = "live";
    pageLive();
  } else pageCollections();
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  setupKeyDialog();
  await refreshRole();
  route();
});
