// computeboard operators' dashboard: polls the adapter's JSON API every
// couple of seconds and renders it. No framework, no build step, nothing
// loaded from elsewhere. Writes (dead-letter replay, dropping a held
// request) send the operator token kept in sessionStorage. Preemptions
// show up as they happen: each poll reads the latest, new rows are
// highlighted, and the tab counts those not seen yet.
"use strict";

const POLL_MS = 2000;
const HISTORY = 90; // samples kept for the charts (3 minutes at 2 s)
const TOKEN_KEY = "computeboard.operatorToken";
const VIEWS = ["overview", "inbox", "jobs", "nodes", "fairshare", "preemptions"];

const state = {
  view: "overview",
  selectedJob: "",
  focusJob: "", // the job a link opened in the Jobs view (highlighted)
  focusPending: false, // move the focus to focusJob's row once the view shows
  preemptSeen: null, // entry ids of the preemptions listed at the last poll (null: none yet)
  preemptUnseen: 0, // preemptions that arrived while another view showed
  history: [], // {t, cpu, memory, gpu, depth, pending, finished}
  data: {},
  errors: {},
  timer: 0,
};

// ---- small helpers --------------------------------------------------------

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function fmtAge(sec) {
  if (sec === null || sec === undefined || !isFinite(sec)) return "–";
  sec = Math.max(0, sec);
  if (sec < 60) return sec.toFixed(sec < 10 ? 1 : 0) + " s";
  if (sec < 3600) return (sec / 60).toFixed(1) + " min";
  if (sec < 86400) return (sec / 3600).toFixed(1) + " h";
  return (sec / 86400).toFixed(1) + " d";
}

function fmtTime(epoch) {
  if (epoch === null || epoch === undefined) return "–";
  return new Date(epoch * 1000).toLocaleString();
}

// bar is a small horizontal gauge of a fraction (set through the CSSOM:
// the page's Content-Security-Policy refuses style attributes).
function bar(frac) {
  const inner = el("span");
  inner.style.width = (100 * Math.max(0, Math.min(1, frac || 0))).toFixed(0) + "%";
  return el("span", { class: "bar", "aria-hidden": "true" }, inner);
}

function pct(x) { return (100 * (x || 0)).toFixed(0) + "%"; }

function shortID(id) { return id && id.length > 12 ? id.slice(0, 12) + "…" : (id || ""); }

function flash(msg, isError) {
  const f = $("#flash");
  f.textContent = msg;
  f.className = isError ? "error" : "";
}

// api fetches a path of the adapter's API, with the token when there is
// one; it resolves to {ok, status, body}.
async function api(path, opts) {
  opts = opts || {};
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  const resp = await fetch(path, { method: opts.method || "GET", headers, cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  return { ok: resp.ok, status: resp.status, body };
}

function apiMessage(r) {
  if (r.body && r.body.error) return r.status + " " + r.body.error.code + ": " + r.body.error.message;
  return "HTTP " + r.status;
}

// fill replaces a tbody's rows unless they are unchanged (so a focused
// button keeps its focus and a click is not lost between polls); the
// element with focus is found again by its data-key after a rebuild.
function fill(tbody, rows, emptyText, ncols) {
  const sig = JSON.stringify(rows.map((r) => r.sig));
  if (tbody.dataset.sig === sig) return;
  tbody.dataset.sig = sig;
  const active = document.activeElement;
  const key = active && tbody.contains(active) ? active.dataset.key : "";
  tbody.replaceChildren(...(rows.length ? rows.map((r) => r.tr) :
    [el("tr", { class: "empty" }, el("td", { colspan: ncols, text: emptyText }))]));
  if (key) {
    const again = tbody.querySelector('[data-key="' + CSS.escape(key) + '"]');
    if (again) again.focus();
  }
}

function setText(sel, v) {
  const e = $(sel);
  const s = v === undefined || v === null ? "–" : String(v);
  if (e.textContent !== s) e.textContent = s;
}

// ---- views ----------------------------------------------------------------

function showView(name) {
  if (!VIEWS.includes(name)) name = "overview";
  state.view = name;
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.dataset.view !== name;
  for (const a of document.querySelectorAll("#tabs a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = "computeboard — " + name;
  if (name === "preemptions") { state.preemptUnseen = 0; showBadge(); }
}

function renderOverview() {
  const s = state.data.scheduler, st = state.data.stats, nodes = state.data.nodes;
  if (s) {
    setText("#ov-pending", s.jobs.pending_jobs);
    setText("#ov-running", s.jobs.running_jobs);
    setText("#ov-completed", s.jobs.completed_jobs);
    setText("#ov-failed", s.jobs.failed_jobs);
    setText("#ov-nodes", s.nodes + " (" + s.healthy + ")");
  } else if (nodes) {
    setText("#ov-nodes", nodes.length);
  }
  if (st) {
    setText("#ov-depth", st.held);
    setText("#ov-dlq", st.dead_letters);
  }
  drawCharts();
}

function renderInbox() {
  const st = state.data.stats;
  if (st) {
    setText("#inbox-depth", st.held);
    setText("#inbox-leased", st.leased);
    setText("#inbox-capacity", st.capacity);
    setText("#inbox-oldest", fmtAge(st.oldest_age_seconds));
    setText("#inbox-intake", (st.intake_per_second || 0).toFixed(2));
    setText("#dlq-count", st.dead_letters);
    const pr = st.by_priority || [];
    fill($("#inbox-by-priority tbody"), [{ sig: pr, tr: el("tr", {}, el("th", { scope: "row", text: "Held" }),
      ...pr.map((n, p) => el("td", { class: "num", "data-priority": p, text: n })))}], "no lanes", 11);
    const mods = Object.entries(st.by_module || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    const TOP = 8, rest = mods.slice(TOP).reduce((sum, [, n]) => sum + n, 0);
    const modRows = mods.slice(0, TOP).map(([m, n]) => ({ sig: [m, n],
      tr: el("tr", { "data-module": m }, el("td", { text: m }), el("td", { class: "num", text: n })) }));
    if (mods.length > TOP) modRows.push({ sig: ["…", mods.length - TOP, rest],
      tr: el("tr", {}, el("td", { class: "muted", text: (mods.length - TOP) + " more modules" }), el("td", { class: "num", text: rest })) });
    fill($("#inbox-by-module tbody"), modRows, "nothing held", 2);
  }
  const items = (state.data.items || []);
  fill($("#inbox-items tbody"), items.map((it) => ({
    sig: [it.entry_id, it.deliveries, it.leased],
    tr: el("tr", { "data-entry-id": it.entry_id },
      el("td", {}, el("code", { title: it.job_id, text: shortID(it.job_id) })),
      el("td", { text: it.module }), el("td", { text: it.account }),
      el("td", { class: "num", text: it.priority }), el("td", { class: "num age", "data-since": Date.now() / 1000 - it.age_seconds, text: fmtAge(it.age_seconds) }),
      el("td", { class: "num", text: it.deliveries }), el("td", { text: it.leased ? "yes" : "no" }),
      el("td", {}, dropButton(it))),
  })), "no request is held", 8);

  const note = $("#dlq-note");
  const dl = state.data.dlq;
  if (state.errors.dlq) {
    note.textContent = state.errors.dlq.status === 401 || state.errors.dlq.status === 403 ?
      "Listing dead letters shows request payloads: enter the operator token above to see them." : apiMessage(state.errors.dlq);
  } else {
    note.textContent = "";
  }
  fill($("#dlq tbody"), (dl || []).map((d) => ({
    sig: [d.id, d.code, d.message],
    tr: el("tr", { "data-dlq-id": d.id },
      el("td", {}, el("code", { text: d.id })),
      el("td", {}, el("code", { title: d.entry_id, text: shortID(d.entry_id) })),
      el("td", { text: d.code }),
      el("td", { class: "entry", title: d.message, text: d.message }),
      el("td", { text: fmtTime(d.failed_at) }),
      el("td", {}, el("button", { type: "button", "data-replay": d.id, "data-key": "replay:" + d.id,
        "aria-label": "Replay dead letter " + d.id, onclick: () => replay(d.id) }, "Replay"))),
  })), dl ? "no dead letters" : "–", 6);
}

function dropButton(it) {
  return el("button", { type: "button", class: "danger", "data-drop": it.entry_id, "data-key": "drop:" + it.entry_id,
    "aria-label": "Drop held request " + it.entry_id,
    onclick: (ev) => {
      const b = ev.currentTarget;
      if (b.dataset.armed !== "1") { // a second press confirms
        b.dataset.armed = "1";
        b.textContent = "Confirm drop";
        setTimeout(() => { b.dataset.armed = ""; b.textContent = "Drop"; }, 5000);
        return;
      }
      drop(it.entry_id);
    } }, "Drop");
}

function renderJobs() {
  const j = state.data.jobs;
  if (!j) return;
  setText("#jobs-total", j.total + " active" + (j.total > j.jobs.length ? ", first " + j.jobs.length + " shown" : ""));
  const now = Date.now() / 1000;
  fill($("#jobs tbody"), j.jobs.map((job) => ({
    sig: [job.job_id, job.status, job.node, job.provider, job.job_id === state.selectedJob, job.job_id === state.focusJob],
    tr: el("tr", { "data-job-id": job.job_id,
      class: job.job_id === state.selectedJob || job.job_id === state.focusJob ? "selected" : "",
      tabindex: job.job_id === state.focusJob ? "-1" : null, "data-key": job.job_id === state.focusJob ? "row:" + job.job_id : null },
      el("td", {}, el("code", { title: job.job_id, text: shortID(job.job_id) })),
      el("td", { class: "status st-" + job.status, text: job.status }),
      el("td", { class: "node", text: job.node || "–" }),
      el("td", { class: "provider", text: job.provider || "–" }),
      el("td", { text: job.account }), el("td", { text: job.module }),
      el("td", { class: "num", text: job.priority }),
      el("td", { class: "num age", "data-since": job.accepted_at, text: fmtAge(now - job.accepted_at) }),
      el("td", {}, job.status === "queued" ? el("button", { type: "button", "data-explain": job.job_id,
        "data-key": "explain:" + job.job_id, "aria-label": "Explain job " + job.job_id,
        onclick: () => selectJob(job.job_id) }, "Explain") : null)),
  })), "no active jobs", 9);
  renderExplain();
}

function renderExplain() {
  const body = $("#explain-body"), empty = $("#explain-empty");
  if (!state.selectedJob) { body.hidden = true; empty.hidden = false; empty.textContent = "Choose “Explain” on a queued job."; return; }
  const r = state.data.explain;
  if (!r || r.id !== state.selectedJob) { body.hidden = true; empty.hidden = false; empty.textContent = "Loading…"; return; }
  if (!r.ok) {
    body.hidden = true; empty.hidden = false;
    empty.textContent = r.status === 404 ? "Job " + r.id + " is not pending any more." : apiMessage(r);
    return;
  }
  const e = r.body;
  empty.hidden = true; body.hidden = false;
  setText("#explain-job", r.id);
  setText("#explain-position", e.position);
  setText("#explain-priority", e.priority);
  setText("#explain-level", e.level);
  setText("#explain-age", e.age_hours);
  setText("#explain-ageterm", e.age_term);
  setText("#explain-fairshare", e.fair_share);
  setText("#explain-urgency", e.deadline_urgency);
  setText("#explain-slack", e.slack_seconds === null || e.slack_seconds === undefined ? "no deadline" : fmtAge(e.slack_seconds));
  setText("#explain-guaranteed", e.guaranteed ? "yes" : "no");
  setText("#explain-placed", e.placed ? "yes" : "no");
  setText("#explain-reason", e.reason || "–");
  setText("#explain-message", e.message || "–");
  setText("#explain-start", e.estimated_start ? fmtTime(e.estimated_start) : "unknown");
  const pe = e.preempted;
  setText("#explain-preempted", pe ? "by " + shortID(pe.by) + " on " + pe.node + " (" + pe.mode + ", " + pe.policy + "), " +
    fmtAge(Date.now() / 1000 - pe.at) + " ago, " + fmtAge(pe.lost_work_seconds) + " of work lost" : "no");
  setText("#explain-evicts", e.evicts && e.evicts.length ? e.evicts.map(shortID).join(", ") : "–");
}

function renderNodes() {
  const nodes = state.data.nodes;
  if (!nodes) return;
  setText("#node-count", nodes.length);
  setText("#node-healthy", nodes.filter((n) => n.healthy).length);
  const use = (n, dim, unit, div) => {
    const cap = (n.capacity || {})[dim] || 0, al = (n.allocated || {})[dim] || 0;
    if (!cap) return el("td", { text: "–" });
    const f = Math.min(1, al / cap);
    return el("td", { "data-dim": dim, title: pct(f) },
      bar(f),
      (al / div).toFixed(div > 1 ? 1 : 0) + " / " + (cap / div).toFixed(div > 1 ? 1 : 0) + " " + unit);
  };
  fill($("#nodes tbody"), nodes.map((n) => ({
    sig: [n.name, n.healthy, n.jobs, n.capacity, n.allocated, !!n.last_heartbeat],
    tr: el("tr", { "data-node": n.name },
      el("td", { text: n.name }),
      el("td", { class: n.healthy ? "healthy" : "unhealthy", text: n.healthy ? "healthy" : ("unhealthy" + (n.unhealthy_reason ? ": " + n.unhealthy_reason : "")) }),
      el("td", { text: n.provider + (n.fake ? " (fake)" : "") }),
      el("td", { class: "num jobs", text: n.jobs }),
      use(n, "cpu", "cores", 1000), use(n, "memory", "GiB", 1024), use(n, "gpu", "GPUs", 1),
      n.last_heartbeat ? el("td", { class: "age", "data-since": n.last_heartbeat, "data-suffix": " ago", text: fmtAge(Date.now() / 1000 - n.last_heartbeat) + " ago" }) : el("td", { text: "–" })),
  })), "no nodes registered", 8);
}

function renderFairShare() {
  const list = state.data.fairshare;
  if (!list) return;
  // The tree: each account under its parent, parents first.
  const kids = new Map();
  for (const a of list) {
    const p = list.some((b) => b.account === a.parent) ? a.parent : "";
    if (!kids.has(p)) kids.set(p, []);
    kids.get(p).push(a);
  }
  const ordered = [];
  const walk = (p, depth) => {
    for (const a of (kids.get(p) || []).sort((x, y) => x.account.localeCompare(y.account))) {
      if (ordered.length > list.length) return; // a cycle: never here (the engine breaks them)
      ordered.push([a, depth]);
      walk(a.account, depth + 1);
    }
  };
  walk("", 0);
  const rows = ordered.map(([a, depth]) => ({
    sig: [a.account, depth, a.shares, a.target_share, a.usage_share, a.factor, a.running_jobs, a.pending_jobs],
    tr: el("tr", { "data-account": a.account },
      el("td", { class: "account", "data-depth": depth, text: "\u2003".repeat(depth) + a.account }),
      el("td", { class: "num", text: a.shares + (a.configured ? "" : " (default)") }),
      el("td", {}, bar(a.target_share), pct(a.target_share)),
      el("td", {}, bar(a.usage_share), pct(a.usage_share)),
      el("td", { class: "num factor", text: a.factor.toFixed(3) }),
      el("td", { class: "num", text: a.running_jobs }),
      el("td", { class: "num", text: a.pending_jobs })),
  }));
  fill($("#fairshare tbody"), rows, "no accounts yet", 7);
}

// jobLink is a job id that opens the job in the Jobs view (key: the
// data-key that keeps its focus across a rebuild of its table).
function jobLink(id, key) {
  return el("a", { href: "#jobs", class: "job", "data-job": id, "data-key": key, title: "Job " + id + " (open in Jobs)",
    onclick: (ev) => { ev.preventDefault(); openJob(id); } }, el("code", { text: shortID(id) }));
}

// openJob shows a job in the Jobs view: its row highlighted and focused,
// and its explanation when it is queued. The view lists active jobs only.
function openJob(id) {
  state.focusJob = id;
  const j = state.data.jobs && state.data.jobs.jobs.find((x) => x.job_id === id);
  if (j && j.status === "queued") { state.selectedJob = id; state.data.explain = null; }
  if (!j) flash("Job " + id + " is not active any more (it ended): the Jobs view lists queued and running jobs only.");
  state.focusPending = true;
  if (location.hash !== "#jobs") { location.hash = "#jobs"; return; } // hashchange shows it
  renderJobs();
  focusJobRow();
  if (state.selectedJob === id) poll();
}

// focusJobRow moves the focus to the job a link opened, if it is listed.
function focusJobRow() {
  if (!state.focusPending) return false;
  state.focusPending = false;
  const tr = document.querySelector('#jobs tr[data-job-id="' + CSS.escape(state.focusJob) + '"]');
  if (!tr) return false;
  tr.focus();
  tr.scrollIntoView({ block: "nearest" });
  return true;
}

function fmtWindow(sec) {
  if (!sec) return "hour";
  if (sec % 3600 === 0) return sec === 3600 ? "hour" : (sec / 3600) + " hours";
  return fmtAge(sec);
}

function showBadge() {
  const b = $("#preempt-badge");
  const n = state.preemptUnseen;
  b.hidden = n === 0;
  const s = n ? n + " new" : "";
  if (b.textContent !== s) b.textContent = s;
}

function renderPreemptions() {
  const p = state.data.preemptions;
  if (!p) return;
  const list = p.preemptions || [];
  // New since the last poll: highlighted, and counted on the tab while
  // another view shows (not at the first poll: that is the history).
  const fresh = new Set(state.preemptSeen === null ? [] : list.map((x) => x.entry_id).filter((id) => !state.preemptSeen.has(id)));
  state.preemptSeen = new Set(list.map((x) => x.entry_id));
  if (state.view !== "preemptions") state.preemptUnseen += fresh.size;
  showBadge();

  setText("#preempt-window", fmtWindow(p.window_seconds));
  setText("#preempt-count", list.length + (p.more ? "+" : ""));
  setText("#preempt-lost", fmtAge(list.reduce((sum, x) => sum + (x.lost_work_seconds || 0), 0)));
  setText("#preempt-victims", new Set(list.map((x) => x.victim)).size);
  const latest = $("#preempt-latest");
  if (list.length) {
    latest.classList.add("age");
    latest.dataset.since = list[0].at;
    latest.dataset.suffix = " ago";
    latest.title = fmtTime(list[0].at);
  } else {
    latest.classList.remove("age");
    delete latest.dataset.since;
    setText("#preempt-latest", "–");
  }
  const now = Date.now() / 1000;
  fill($("#preemptions tbody"), list.map((x) => ({
    sig: [x.entry_id, fresh.has(x.entry_id)],
    tr: el("tr", { "data-entry-id": x.entry_id, class: fresh.has(x.entry_id) ? "new" : "" },
      el("td", { class: "age", "data-since": x.at, "data-suffix": " ago", title: fmtTime(x.at), text: fmtAge(now - x.at) + " ago" }),
      el("td", { class: "victim", title: "priority " + x.priority }, jobLink(x.victim, "victim:" + x.entry_id)),
      el("td", { class: "account", text: x.account }),
      el("td", { class: "preemptor" }, jobLink(x.preemptor, "preemptor:" + x.entry_id)),
      el("td", { class: "policy", text: x.policy }),
      el("td", { class: "mode mode-" + x.mode, text: x.mode }),
      el("td", { class: "node", title: x.provider ? "provider " + x.provider : null, text: x.node }),
      el("td", { class: "num lost", "data-seconds": x.lost_work_seconds, text: fmtAge(x.lost_work_seconds) }),
      el("td", { class: "reason", title: x.reason, text: x.reason })),
  })), "No preemption in the last " + fmtWindow(p.window_seconds) + ". (Preemption is off unless the scheduler's config sets scheduler.preemption.policy.)", 9);
}

// ---- charts ---------------------------------------------------------------

const SVGNS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// drawChart draws series (arrays of numbers, one per sample) as polylines
// in svg, scaled to max (or to the largest value).
function drawChart(svg, series, max, fmt) {
  const W = 360, H = 120, L = 34, B = 14, T = 6;
  let top = max || 0;
  if (!max) for (const s of series) for (const v of s) top = Math.max(top, v);
  if (!top) top = 1;
  // The window grows with the samples, up to HISTORY of them.
  const n = Math.min(HISTORY, Math.max(10, ...series.map((s) => s.length)));
  const kids = [
    svgEl("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }),
    svgEl("line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B }),
  ];
  const lbl = (y, s) => { const t = svgEl("text", { x: 2, y }); t.textContent = s; return t; };
  kids.push(lbl(T + 8, fmt(top)), lbl(H - B, fmt(0)));
  const tl = svgEl("text", { x: L, y: H - 2 }); tl.textContent = "−" + Math.round((n - 1) * POLL_MS / 1000) + " s";
  const tr = svgEl("text", { x: W - 22, y: H - 2 }); tr.textContent = "now";
  kids.push(tl, tr);
  series.forEach((s, i) => {
    if (!s.length || s.every((v) => v === null)) return;
    const off = n - s.length;
    const pts = s.map((v, k) => {
      const x = L + (W - L) * (off + k) / (n - 1);
      const y = H - B - (H - B - T) * Math.min(1, (v || 0) / top);
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" ");
    kids.push(svgEl("polyline", { class: "s" + i, points: pts }));
  });
  svg.replaceChildren(...kids);
}

function drawCharts() {
  const h = state.history;
  drawChart($("#chart-util"), [h.map((p) => p.cpu), h.map((p) => p.memory), h.map((p) => p.gpu)], 1, pct);
  drawChart($("#chart-queue"), [h.map((p) => p.depth), h.map((p) => p.pending)], 0, (v) => String(Math.round(v)));
  const tput = h.map((p, i) => {
    if (i === 0) return 0;
    const dt = (p.t - h[i - 1].t) / 60000;
    return dt > 0 ? Math.max(0, p.finished - h[i - 1].finished) / dt : 0;
  });
  drawChart($("#chart-tput"), [tput], 0, (v) => v.toFixed(v < 10 ? 1 : 0) + "/min");
}

function sample() {
  const s = state.data.scheduler, st = state.data.stats;
  if (!s) return;
  const u = s.utilization || {};
  // gpu is null when the pool has none (the API leaves it out then).
  state.history.push({ t: Date.now(), cpu: u.cpu || 0, memory: u.memory || 0, gpu: "gpu" in u ? u.gpu : null,
    depth: st ? st.held : s.jobs.inbox_depth, pending: s.jobs.pending_jobs,
    finished: s.jobs.completed_jobs + s.jobs.failed_jobs + s.jobs.cancelled_jobs });
  if (state.history.length > HISTORY) state.history.shift();
}

// ---- polling --------------------------------------------------------------

async function poll() {
  clearTimeout(state.timer);
  const want = {
    scheduler: "/api/v1/scheduler",
    stats: "/api/v1/inbox/stats",
    items: "/api/v1/inbox/items?limit=200",
    dlq: "/api/v1/inbox/dlq?count=200",
    nodes: "/api/v1/nodes",
    jobs: "/api/v1/jobs?limit=500",
    fairshare: "/api/v1/fairshare",
    preemptions: "/api/v1/preemptions?limit=100",
  };
  const keys = Object.keys(want);
  const results = await Promise.allSettled(keys.map((k) => api(want[k])));
  let failed = 0;
  results.forEach((r, i) => {
    const k = keys[i];
    if (r.status !== "fulfilled" || !r.value.ok) {
      state.errors[k] = r.status === "fulfilled" ? r.value : { status: 0, body: null };
      if (k === "dlq") state.data.dlq = null; else failed++;
      return;
    }
    delete state.errors[k];
    const b = r.value.body;
    state.data[k] = k === "items" ? b.items : k === "dlq" ? b.dead_letters : k === "nodes" ? (b.nodes || []) :
      k === "fairshare" ? (b.accounts || []) : b;
  });
  if (state.selectedJob) {
    try {
      const r = await api("/api/v1/jobs/" + encodeURIComponent(state.selectedJob) + "/explain");
      r.id = state.selectedJob;
      state.data.explain = r;
    } catch (e) { /* shown as loading until the next poll */ }
  }
  sample();
  const conn = $("#conn");
  conn.textContent = failed ? "some API calls failed (" + Object.entries(state.errors).filter(([k]) => k !== "dlq")
    .map(([k, v]) => k + ": " + (v.status ? apiMessage(v) : "unreachable")).join("; ") + ")" :
    "updated " + new Date().toLocaleTimeString() + " · every " + POLL_MS / 1000 + " s";
  document.body.dataset.polls = String((Number(document.body.dataset.polls) || 0) + 1);
  render();
  state.timer = setTimeout(poll, POLL_MS);
}

// updateAges rewrites the age cells in place (rows are rebuilt only when
// their data changes).
function updateAges() {
  const now = Date.now() / 1000;
  for (const td of document.querySelectorAll(".age[data-since]")) {
    const s = fmtAge(now - Number(td.dataset.since)) + (td.dataset.suffix || "");
    if (td.textContent !== s) td.textContent = s;
  }
}

function render() {
  renderOverview();
  renderInbox();
  renderJobs();
  renderNodes();
  renderFairShare();
  renderPreemptions();
  updateAges();
}

// ---- actions --------------------------------------------------------------

async function replay(id) {
  if (!token()) { flash("Replaying a dead letter needs the operator token: enter it above.", true); $("#token").focus(); return; }
  const r = await api("/api/v1/inbox/dlq/" + encodeURIComponent(id) + "/replay", { method: "POST" });
  if (r.ok) flash("Replayed dead letter " + id + " (new message " + r.body.message_id + ").");
  else flash("Replay of " + id + " failed: " + apiMessage(r), true);
  poll();
}

async function drop(entryID) {
  if (!token()) { flash("Dropping a request needs the operator token: enter it above.", true); $("#token").focus(); return; }
  const r = await api("/api/v1/inbox/items/" + encodeURIComponent(entryID), { method: "DELETE" });
  if (r.ok) flash("Dropped request " + entryID + ".");
  else flash("Drop of " + entryID + " failed: " + apiMessage(r), true);
  poll();
}

function selectJob(id) {
  state.selectedJob = id;
  state.focusJob = "";
  state.data.explain = null;
  renderJobs();
  poll();
}

function showTokenState() {
  setText("#token-state", token() ? "token set (this tab only)" : "no token");
}

// ---- start ----------------------------------------------------------------

// Count what the Content-Security-Policy refuses (the browser test
// expects none).
document.addEventListener("securitypolicyviolation", (ev) => {
  document.body.dataset.cspViolations = String((Number(document.body.dataset.cspViolations) || 0) + 1);
  console.error("CSP refused", ev.violatedDirective, ev.blockedURI);
});

document.addEventListener("DOMContentLoaded", () => {
  $("#token").value = token();
  showTokenState();
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("#token").value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    flash(v ? "Token kept for this tab (sessionStorage)." : "Token forgotten.");
    poll();
  });
  $("#token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("#token").value = "";
    showTokenState();
    flash("Token forgotten.");
    poll();
  });
  $("#explain-close").addEventListener("click", () => {
    const id = state.selectedJob;
    state.selectedJob = "";
    renderJobs();
    const b = document.querySelector('[data-explain="' + CSS.escape(id) + '"]');
    if (b) b.focus();
  });
  window.addEventListener("hashchange", () => {
    showView(location.hash.slice(1));
    if (state.view === "jobs" && state.focusPending) {
      renderJobs();
      if (focusJobRow()) {
        if (state.selectedJob === state.focusJob) poll();
        return;
      }
    }
    $("#main").focus();
  });
  showView(location.hash.slice(1));
  poll();
});
