// jobhost dashboard. Every string that comes from a plugin or a producer is put on the
// page as text (textContent), never as markup.
"use strict";

const SAMPLES = 120; // two minutes of one-second samples per queue
const RATE_WINDOW = 10; // the rate shown beside a chart: the last ten seconds' average
const state = {
  overview: null,
  series: new Map(), // queue -> [{t, done, failed}]
  deadQueue: null,
  deadSeen: null, // the dead count the shown list was read at
  canChange: false,
};

// --- building elements ---------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// --- formatting ----------------------------------------------------------------------

function count(n) {
  return n === null || n === undefined ? "–" : n.toLocaleString("en-US");
}

function numCell(n, someClass) {
  const classes = ["num"];
  if (n === 0) classes.push("zero");
  else if (n && someClass) classes.push(someClass);
  return el("td", { class: classes.join(" ") }, count(n));
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms === 0) return "0s";
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  if (s < 60) return `${+s.toFixed(1)}s`;
  const m = s / 60;
  if (m < 60) return `${+m.toFixed(1)}m`;
  const h = m / 60;
  if (h < 24) return `${+h.toFixed(1)}h`;
  return `${+(h / 24).toFixed(1)}d`;
}

function ago(atMs, now) {
  const s = Math.max(0, Math.round((now - atMs) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

function clock(atMs) {
  return new Date(atMs).toLocaleString();
}

function shortVersion(version) {
  return version.length > 12 ? version.slice(0, 12) : version;
}

function basename(path) {
  const parts = String(path).split("/");
  return parts[parts.length - 1] || path;
}

function preview(value, max) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function policyText(policy) {
  const n = policy.max_attempts;
  const attempts = `${n} attempt${n === 1 ? "" : "s"}`;
  const b = policy.backoff;
  if (n <= 1) return `${attempts}, no retries`;
  switch (b.kind) {
    case "none": return `${attempts}, retry at once`;
    case "fixed": return `${attempts}, every ${duration(b.delay_ms)}`;
    case "exponential":
      return `${attempts}, ${duration(b.base_ms)} ×${b.factor} up to ${duration(b.max_ms)}${b.jitter ? ", jittered" : ""}`;
    default: return attempts;
  }
}

function scheduleText(report) {
  if (report.policy.max_attempts <= 1) return "none: the first failure is final";
  const rows = report.schedule.slice(0, Math.max(1, report.policy.max_attempts - 1));
  return rows.map((row) => duration(row.computed_wait_ms) + (row.and_later ? " and later" : "")).join(" · ");
}

// --- toast ---------------------------------------------------------------------------

let toastTimer = null;
function toast(message, isError) {
  const box = document.getElementById("toast");
  box.textContent = message;
  box.className = isError ? "show error" : "show";
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.className = ""; }, 4000);
}

// --- queues and throughput -----------------------------------------------------------

function record(overview) {
  const t = overview.at_ms;
  for (const queue of overview.queues) {
    const a = queue.activity;
    const sample = { t, done: a.completed, failed: a.retried + a.dead_lettered };
    const series = state.series.get(queue.name) || [];
    const last = series[series.length - 1];
    if (!last || last.t !== t) series.push(sample);
    while (series.length > SAMPLES + 1) series.shift();
    state.series.set(queue.name, series);
  }
}

function rates(series, key) {
  const out = [];
  for (let i = 1; i < series.length; i++) {
    const dt = (series[i].t - series[i - 1].t) / 1000;
    const d = series[i][key] - series[i - 1][key];
    out.push(dt > 0 ? Math.max(0, d / dt) : 0);
  }
  return out;
}

function average(values) {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0;
}

function sparkline(series) {
  const width = 220, height = 38, pad = 3;
  const done = rates(series, "done");
  const failed = rates(series, "failed");
  const peak = Math.max(1, ...done, ...failed);
  const x = (i) => width - pad - (done.length - 1 - i) * ((width - 2 * pad) / (SAMPLES - 1));
  const y = (v) => height - pad - (v / peak) * (height - 2 * pad);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  chart.append(svg("line", { x1: 0, x2: width, y1: height - pad, y2: height - pad, stroke: "#e4e8ee" }));
  const line = (values, color, fill) => {
    if (values.length === 0) return;
    const points = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
    if (fill) {
      const area = `${x(0).toFixed(1)},${height - pad} ${points.join(" ")} ${x(values.length - 1).toFixed(1)},${height - pad}`;
      chart.append(svg("polygon", { points: area, fill, stroke: "none" }));
    }
    chart.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: color, "stroke-width": 1.6, "stroke-linejoin": "round" }));
  };
  if (done.length < 2) {
    const note = svg("text", { x: width / 2, y: height / 2 + 4, "text-anchor": "middle", "font-size": 11, fill: "#98a2b3" });
    note.textContent = "collecting samples…";
    chart.append(note);
  }
  line(done, "#1f9d55", "rgba(31,157,85,.12)");
  line(failed, "#d64545", null);
  const now = average(done.slice(-RATE_WINDOW));
  const bad = average(failed.slice(-RATE_WINDOW));
  const label = el("span", { class: "rate", title: "jobs completed per second over the last 10 s (green line); failed attempts per second (red line)" },
    el("strong", {}, now.toFixed(1)), " /s", bad > 0 ? el("span", { class: "b-bad badge" }, `${bad.toFixed(1)} failing`) : null);
  return el("div", { class: "spark" }, chart, label);
}

// Give the fleet an operator order (`POST path {by}`); a toast says `done` or why it failed.
// Whether it was given.
async function giveOrder(path, done, what) {
  try {
    const answer = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ by: "dashboard" }),
    });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) throw new Error(body.error || `${answer.status} ${answer.statusText}`);
    toast(done, false);
    return true;
  } catch (err) {
    toast(`${what} failed: ${err.message}`, true);
    return false;
  }
}

// Pause or resume `queue` for the whole fleet; the next overview shows the state.
function pauseQueue(queue, pause) {
  const path = `/queues/${encodeURIComponent(queue)}/${pause ? "pause" : "resume"}`;
  return giveOrder(path,
    pause ? `Paused ${queue} for the fleet: no host consumes it` : `Resumed ${queue} for the fleet`,
    pause ? "Pause" : "Resume");
}

// Cancel the job whose id is in the form, wherever it is; its dead letter says who and when.
function wireCancelForm() {
  const form = document.getElementById("cancel-job");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = document.getElementById("cancel-id").value.trim();
    if (!id) return;
    giveOrder(`/jobs/${encodeURIComponent(id)}/cancel`,
      `Cancelled job ${id.slice(0, 8)}: interrupted where it runs, or settled as cancelled when delivered`, "Cancel")
      .then((given) => {
        if (given) document.getElementById("cancel-id").value = "";
        state.deadSeen = null;
        loadDead();
      });
  });
}

// A fleet-wide limit as a person reads it, with where it is set in its title.
function limitText(limit, what) {
  if (!limit) return null;
  const per = limit.key ? ` per ${limit.key}` : "";
  const respects = limit.respects_retry_after ? ", respects Retry-After" : "";
  const text = what === "rate" ? `${limit.limit} (burst ${limit.burst})${per}${respects}` : `≤ ${limit.limit} at once${per}`;
  return el("span", { class: "limit", title: `set in ${limit.from}` }, text);
}

// The concurrency cap and rate limit of a queue or job view, or nothing.
function limitsOf(view) {
  const parts = [limitText(view.concurrency, "cap"), limitText(view.rate, "rate")].filter(Boolean);
  return parts.flatMap((part, i) => (i ? [" · ", part] : [part]));
}

function renderQueues(overview) {
  const views = new Map(overview.plugins.flatMap((p) => p.queues).map((q) => [q.name, q]));
  const rows = overview.queues.map((q) => {
    const a = q.activity;
    const nameCell = el("td", {}, el("span", { class: "name" }, q.name));
    const pausedWhy = q.paused_in_file
      ? "paused by this host's grants file (paused = true): a resume does not undo it"
      : "paused for the fleet: no host consumes it";
    if (q.paused) nameCell.append(" ", el("span", { class: "badge b-bad", title: pausedWhy }, q.paused_in_file ? "paused (file)" : "paused"));
    nameCell.append(" ", el("button", {
      class: "btn btn-small", type: "button", "data-action": q.paused ? "resume" : "pause", disabled: !state.canChange,
      title: q.paused ? "Let every host consume this queue again" : "Stop every host consuming this queue; running jobs finish",
      onclick: () => pauseQueue(q.name, !q.paused),
    }, q.paused ? "Resume" : "Pause"));
    const limits = limitsOf(views.get(q.name) || {});
    if (limits.length) nameCell.append(el("div", { class: "muted limits" }, ...limits));
    if (q.depth_error) nameCell.append(el("div", { class: "muted", title: q.depth_error }, "broker did not answer"));
    return el("tr", { "data-queue": q.name },
      nameCell,
      numCell(q.ready),
      numCell(a.in_flight, "flight-some"),
      numCell(q.held, "held-some"),
      numCell(q.dead, "dead-some"),
      numCell(a.completed),
      numCell(a.retried),
      numCell(a.dead_lettered),
      numCell(a.expired || 0),
      numCell(a.cancelled || 0),
      numCell(a.throttled || 0),
      el("td", {}, sparkline(state.series.get(q.name) || [])));
  });
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 12, class: "muted" }, "No plugin is loaded, so no queue is consumed.")));
  replaceRows(document.querySelector("#queues tbody"), rows);
}

// --- plugins and reloads -------------------------------------------------------------

function historyItem(event, now) {
  const c = event.change;
  let badge, what;
  switch (c.kind) {
    case "loaded":
      badge = el("span", { class: "badge b-ok" }, "loaded");
      what = [c.plugin, " ", el("span", { class: "version", title: c.version }, shortVersion(c.version))];
      break;
    case "replaced":
      badge = el("span", { class: "badge b-info" }, "replaced");
      what = [el("span", { class: "version", title: c.old }, shortVersion(c.old)), " → ",
        el("span", { class: "version", title: c.new }, shortVersion(c.new))];
      break;
    case "refused":
      badge = el("span", { class: "badge b-bad" }, "refused");
      what = [c.cause];
      break;
    case "on_probation":
      badge = el("span", { class: "badge b-info" }, "on probation");
      what = [el("span", { class: "version", title: c.new }, shortVersion(c.new)),
        ` takes ${c.share_percent}% beside `,
        el("span", { class: "version", title: c.old }, shortVersion(c.old))];
      break;
    case "promoted":
      badge = el("span", { class: "badge b-ok" }, "promoted");
      what = [el("span", { class: "version", title: c.new }, shortVersion(c.new)), " serves everything"];
      break;
    case "rolled_back":
      badge = el("span", { class: "badge b-bad" }, "rolled back");
      what = [el("span", { class: "version", title: c.new }, shortVersion(c.new)), ": ", c.cause];
      break;
    default:
      badge = el("span", { class: "badge b-plain" }, "removed");
      what = ["file removed; its consumers stopped"];
  }
  return el("li", { "data-kind": c.kind },
    el("span", { class: "when", title: clock(event.at_ms) }, ago(event.at_ms, now)),
    badge,
    el("span", { class: "what" }, ...what));
}

function historyOf(file, reloads, now) {
  const events = reloads.filter((e) => e.file === file).slice(0, 20);
  if (events.length === 0) return null;
  return el("ul", { class: "history" }, events.map((e) => historyItem(e, now)));
}

// What the operator's grants file gives a plugin: origins, limits, config keys and where
// each secret comes from (the API never carries a secret's value).
function grantsOf(grants) {
  if (!grants) return el("dd", { class: "muted" }, "none: no network, config or secrets (no section in the grants file)");
  const origins = grants.allowed_outbound_hosts.join(", ") || "no outbound requests";
  const limits = `${grants.max_concurrent_requests} at once, ${bytes(grants.max_response_bytes)} per response, ${grants.request_timeout_ms / 1000} s per request`
    + (grants.ca_certificates ? `; https also trusts the CAs in ${grants.ca_certificates}` : "");
  const config = grants.config_keys.length ? `config: ${grants.config_keys.join(", ")}` : "no config";
  const secrets = grants.secrets.length
    ? `secrets: ${grants.secrets.map((s) => `${s.key} (${s.source} ${s.from})`).join(", ")}`
    : "no secrets";
  return el("dd", { class: "grants" },
    el("div", { class: "mono" }, origins),
    el("div", { class: "muted" }, limits),
    el("div", { class: "muted" }, `${config}; ${secrets}`));
}

// Which section the plugin's file binds it to ([plugins.NAME] for NAME.wasm) and its pin.
function bindingOf(binding) {
  if (!binding) return [];
  const pin = { unpinned: "not pinned", matches: "pinned, matches", mismatch: "pinned to another binary: runs without its grants" }[binding.pin];
  return [el("dt", {}, "Bound by"),
    el("dd", { class: binding.pin === "mismatch" ? "pin-mismatch" : "muted", title: `sha256 ${binding.sha256}` },
      `[plugins.${binding.section}] ← ${binding.section}.wasm; ${pin}`)];
}

function bytes(n) {
  if (n >= 1048576) return `${(n / 1048576).toFixed(n % 1048576 ? 1 : 0)} MiB`;
  if (n >= 1024) return `${(n / 1024).toFixed(n % 1024 ? 1 : 0)} KiB`;
  return `${n} B`;
}

function renderPlugins(overview) {
  const now = overview.at_ms;
  const loaded = new Set(overview.plugins.map((p) => p.file));
  const cards = overview.plugins.map((p) => el("div", { class: "plugin", "data-file": p.file },
    el("div", { class: "plugin-head" },
      el("span", { class: "name" }, p.name),
      el("span", { class: "version", title: p.version }, shortVersion(p.version)),
      ...(p.on_probation_against
        ? [el("span", { class: "badge b-info", title: `version ${p.on_probation_against} serves the rest of the deliveries until a verdict` },
          `on probation beside ${shortVersion(p.on_probation_against)}`)]
        : []),
      el("span", { class: "muted mono", title: p.file }, basename(p.file))),
    el("dl", { class: "facts" },
      el("dt", {}, "Queues"), el("dd", {}, p.queues.map((q) => q.name).join(", ") || "none"),
      el("dt", {}, "Job types"), el("dd", {}, p.jobs.map((j) => j.name).join(", ") || "none"),
      el("dt", {}, "Grants"), grantsOf(p.grants), ...bindingOf(p.binding)),
    historyOf(p.file, overview.reloads, now)));
  const orphans = [...new Set(overview.reloads.map((e) => e.file))].filter((f) => !loaded.has(f));
  for (const file of orphans) {
    cards.push(el("div", { class: "plugin", "data-file": file },
      el("div", { class: "plugin-head" },
        el("span", { class: "name" }, basename(file)),
        el("span", { class: "badge b-plain" }, "not loaded")),
      historyOf(file, overview.reloads, now)));
  }
  if (cards.length === 0) cards.push(el("p", { class: "empty" }, "No plugin loaded yet: drop a .wasm into the plugin directory."));
  document.getElementById("plugins").replaceChildren(...cards);
}

// --- job types -----------------------------------------------------------------------

function renderJobs(overview) {
  const sources = { job: ["job", "b-info"], queue: ["queue", "b-plain"], default: ["default", "b-warn"] };
  const views = new Map(overview.plugins.flatMap((p) => p.jobs).map((j) => [j.name, j]));
  const rows = overview.jobs.map((j) => {
    const [label, cls] = sources[j.source] || [j.source, "b-plain"];
    const view = views.get(j.job_type) || {};
    const timeout = view.timeout_ms ?? j.queue.timeout_ms;
    const limits = limitsOf(view);
    return el("tr", {},
      el("td", {}, el("span", { class: "name" }, j.job_type), el("div", { class: "muted" }, j.plugin.split("@")[0])),
      el("td", { class: "mono" }, j.queue.name),
      el("td", {}, policyText(j.policy)),
      el("td", {}, el("span", { class: `badge ${cls}` }, label)),
      el("td", {}, timeout ? duration(timeout) : el("span", { class: "muted" }, "host default")),
      el("td", { class: "limits" }, ...(limits.length ? limits : [el("span", { class: "muted" }, "none")])),
      el("td", { class: "mono" }, scheduleText(j)));
  });
  replaceRows(document.querySelector("#jobs tbody"), rows);
}

// --- failures ------------------------------------------------------------------------

// An expired job is no failure of its handler, but it did not run: shown as a warning.
function outcomeBadge(outcome) {
  switch (outcome) {
    case "retried": return el("span", { class: "badge b-warn" }, "retried");
    case "expired": return el("span", { class: "badge b-warn" }, "expired");
    case "cancelled": return el("span", { class: "badge b-plain" }, "cancelled");
    default: return el("span", { class: "badge b-bad" }, "dead-lettered");
  }
}

function renderFailures(overview) {
  const now = overview.at_ms;
  const rows = overview.failures.slice(0, 25).map((f) => el("tr", {},
    el("td", { class: "muted when-col", title: clock(f.at_ms) }, ago(f.at_ms, now)),
    el("td", { class: "job-col" },
      el("span", { class: "name", title: f.job_type || "" }, f.job_type || "(not an envelope)"),
      f.job_id ? el("div", { class: "mono muted", title: f.job_id }, f.job_id.slice(0, 8)) : null),
    el("td", { class: "num" }, String(f.attempt)),
    el("td", {}, outcomeBadge(f.outcome)),
    el("td", { class: "reason" }, f.reason)));
  replaceRows(document.querySelector("#failures tbody"), rows);
  document.getElementById("failures-empty").classList.toggle("hidden", rows.length > 0);
  document.getElementById("failures").classList.toggle("hidden", rows.length === 0);
}

// --- batches -------------------------------------------------------------------------

// Completed in green then dead in red, of the whole width; drawn in SVG because the page's
// Content-Security-Policy allows no inline style to size a bar with.
function progressBar(b) {
  const bar = svg("svg", { class: "bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", role: "img" });
  const share = (n) => (b.total > 0 ? (100 * n) / b.total : 0);
  bar.append(svg("rect", { x: 0, y: 0, width: share(b.completed), height: 8, fill: "#1f9d55" }));
  bar.append(svg("rect", { x: share(b.completed), y: 0, width: share(b.dead), height: 8, fill: "#d64545" }));
  return bar;
}

function callbackLine(c) {
  const fired = c.fired
    ? [el("span", { class: "badge b-ok" }, "fired"), " ", el("span", { class: "mono", title: c.fired }, c.fired.slice(0, 8))]
    : [el("span", { class: "muted" }, "not fired")];
  return el("div", { class: "callback", "data-callback": c.callback },
    el("span", { class: "badge b-plain" }, c.callback),
    el("span", { class: "mono clip", title: c.job_type }, c.job_type),
    ...fired);
}

// The overview carries the newest batches only, a bounded list.
function renderBatches(overview) {
  const now = overview.at_ms;
  const rows = overview.batches.map((b) => el("tr", { "data-batch": b.batch_id },
    el("td", { class: "mono", title: b.batch_id }, b.batch_id.slice(0, 8)),
    el("td", { class: "muted when-col", title: clock(b.opened_at_ms) }, ago(b.opened_at_ms, now)),
    el("td", {}, progressBar(b),
      el("div", { class: "counts" }, `${count(b.completed)} completed · `,
        el("span", { class: b.dead ? "dead-some" : null }, `${count(b.dead)} dead`),
        ` · ${count(b.pending)} pending of ${count(b.total)}`)),
    el("td", {}, ...(b.callbacks.length ? b.callbacks.map(callbackLine) : [el("span", { class: "muted" }, "none")]))));
  replaceRows(document.querySelector("#batches tbody"), rows);
  document.getElementById("batches-empty").classList.toggle("hidden", rows.length > 0);
  document.getElementById("batches").classList.toggle("hidden", rows.length === 0);
}

// --- dead letters --------------------------------------------------------------------

function renderDeadTabs(overview) {
  const names = overview.queues.map((q) => q.name);
  if (!names.includes(state.deadQueue)) {
    const withDead = overview.queues.find((q) => q.dead > 0);
    state.deadQueue = withDead ? withDead.name : (names[0] || null);
    state.deadSeen = null;
  }
  const tabs = overview.queues.map((q) => el("button", {
    class: "tab", type: "button", role: "tab", "data-queue": q.name,
    "aria-selected": q.name === state.deadQueue ? "true" : "false",
    onclick: () => { state.deadQueue = q.name; state.deadSeen = null; renderDeadTabs(state.overview); loadDead(); },
  }, q.name, el("span", { class: "count" }, q.dead ? count(q.dead) : "")));
  document.getElementById("dead-tabs").replaceChildren(...tabs);
  const current = overview.queues.find((q) => q.name === state.deadQueue);
  const dead = current ? current.dead : null;
  if (dead !== state.deadSeen) {
    state.deadSeen = dead;
    loadDead();
  }
}

async function loadDead() {
  const queue = state.deadQueue;
  if (!queue) return renderDead({ letters: [], left_out: 0 });
  try {
    const answer = await fetch(`/dead/${encodeURIComponent(queue)}?limit=100`, { credentials: "same-origin" });
    const body = await answer.json();
    if (queue !== state.deadQueue) return;
    if (!answer.ok) throw new Error(body.error || answer.statusText);
    renderDead(body);
  } catch (err) {
    toast(`Reading the dead letters of ${queue} failed: ${err.message}`, true);
  }
}

// The API answers excerpts: each letter's headers and the start of its body, never a
// whole payload, in an answer capped in bytes that says how many letters it left out.
function renderDead(list) {
  const queue = state.deadQueue;
  const rows = list.letters.map((d) => {
    const id = d.job_id;
    const actions = el("td", { class: "actions" },
      el("button", {
        class: "btn", type: "button", "data-action": "replay", disabled: !state.canChange || !id,
        title: id ? "Put it back on its queue as attempt 1" : "Not an envelope: it cannot be replayed",
        onclick: () => act("POST", `/dead/${encodeURIComponent(queue)}/${id}/replay`, `Replayed job ${id.slice(0, 8)} onto ${queue}`),
      }, "Replay"),
      el("button", {
        class: "btn btn-danger", type: "button", "data-action": "purge", disabled: !state.canChange || !id,
        onclick: () => confirm(`Drop the dead letter of job ${id}? This cannot be undone.`)
          && act("DELETE", `/dead/${encodeURIComponent(queue)}/${id}`, `Purged job ${id.slice(0, 8)}`),
      }, "Purge"));
    return el("tr", { "data-job-id": id || "" },
      el("td", { class: "mono", title: id || "" }, id ? id.slice(0, 8) : "–"),
      el("td", {}, el("span", { class: "name" }, d.job_type || "(not an envelope)")),
      el("td", { class: "reason" }, d.reason || "–"),
      el("td", { class: "num" }, d.attempts === null || d.attempts === undefined ? "–" : String(d.attempts)),
      el("td", {}, el("span", { class: "mono clip", title: d.body }, preview(d.body, 120))),
      actions);
  });
  replaceRows(document.querySelector("#dead tbody"), rows);
  const more = document.getElementById("dead-more");
  more.textContent = list.left_out ? `${count(list.left_out)} more not shown: a listing shows the first letters, each cut to its start.` : "";
  more.classList.toggle("hidden", !list.left_out);
  document.getElementById("dead-empty").classList.toggle("hidden", rows.length > 0);
  document.getElementById("dead").classList.toggle("hidden", rows.length === 0);
  document.getElementById("replay-all").disabled = !state.canChange || rows.length === 0;
  document.getElementById("purge-all").disabled = !state.canChange || rows.length === 0;
}

async function act(method, url, done) {
  try {
    const answer = await fetch(url, { method, credentials: "same-origin" });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) throw new Error(body.error || `${answer.status} ${answer.statusText}`);
    toast(typeof done === "function" ? done(body) : done, false);
  } catch (err) {
    toast(`${method === "DELETE" ? "Purge" : "Replay"} failed: ${err.message}`, true);
  }
  state.deadSeen = null;
  loadDead();
}

function wireDeadButtons() {
  document.getElementById("replay-all").addEventListener("click", () => {
    const queue = state.deadQueue;
    act("POST", `/dead/${encodeURIComponent(queue)}/replay`,
      (r) => `Replayed ${r.replayed} dead letter(s) onto ${queue}` + (r.skipped ? `, ${r.skipped} not envelopes stayed` : ""));
  });
  document.getElementById("purge-all").addEventListener("click", () => {
    const queue = state.deadQueue;
    if (!confirm(`Drop every dead letter of ${queue}? This cannot be undone.`)) return;
    act("DELETE", `/dead/${encodeURIComponent(queue)}`, (r) => `Purged ${r.purged} dead letter(s) of ${queue}`);
  });
}

// --- session and live stream ---------------------------------------------------------

async function loadSession() {
  try {
    const answer = await fetch("/api/session", { credentials: "same-origin" });
    state.canChange = answer.ok && (await answer.json()).can_change === true;
  } catch (_) {
    state.canChange = false;
  }
  const pill = document.getElementById("session");
  pill.textContent = state.canChange ? "signed in" : "signed out";
  pill.className = state.canChange ? "pill pill-session" : "pill";
}

// --- schedules -----------------------------------------------------------------------

// How often the page reads `GET /schedules`: its next ticks and firings come from the
// broker, so not with every overview.
const SCHEDULES_EVERY_MS = 10000;

async function loadSchedules() {
  try {
    const answer = await fetch("/schedules", { credentials: "same-origin" });
    const body = await answer.json();
    if (!answer.ok) throw new Error(body.error || answer.statusText);
    renderSchedules(body, Date.now());
  } catch (err) {
    toast(`Reading the schedules failed: ${err.message}`, true);
  }
}

function renderSchedules(schedules, now) {
  const rows = schedules.map((s) => {
    const when = s.cron ? `${s.cron} (${s.tz || "UTC"})` : `every ${duration(s.every_ms)}`;
    const name = el("td", { title: `set in ${s.from}` }, el("span", { class: "name" }, s.name));
    if (s.from.startsWith("plugin ")) name.append(" ", el("span", { class: "badge b-plain", title: `declared by ${s.from}` }, s.from));
    if (!s.enabled) name.append(" ", el("span", { class: "badge b-plain", title: "enabled = false: it does not fire" }, "disabled"));
    const next = s.next_ms === null || s.next_ms === undefined
      ? el("span", { class: "muted" }, "none")
      : el("span", { title: clock(s.next_ms) }, s.next_ms > now ? `in ${duration(s.next_ms - now)}` : "due");
    const firings = s.firings.slice(0, 3).map((f) => el("div", { class: "firing", title: `enqueued ${clock(f.at_ms)} by ${f.host}` },
      el("span", { class: "when" }, ago(f.tick_ms, now)), " ", el("span", { class: "muted" }, f.host), " ",
      el("span", { class: "mono" }, String(f.job_id).slice(0, 8)), " ",
      f.ended
        ? el("span", { class: "badge b-plain", title: `attempt ${f.ended.attempt} on ${f.ended.host}, ${clock(f.ended.at_ms)}` }, f.ended.outcome)
        : el("span", { class: "muted" }, "running or waiting")));
    return el("tr", { "data-schedule": s.name },
      name,
      el("td", { class: "mono" }, s.job_type),
      el("td", { class: "mono" }, when),
      el("td", {}, s.missed),
      el("td", {}, next),
      el("td", {}, ...(firings.length ? firings : [el("span", { class: "muted" }, "not fired yet")])));
  });
  replaceRows(document.querySelector("#schedules tbody"), rows);
  document.getElementById("schedules-empty").classList.toggle("hidden", rows.length > 0);
}

function render(overview) {
  state.overview = overview;
  record(overview);
  document.getElementById("backend").textContent = `backend: ${overview.backend}`;
  renderQueues(overview);
  renderDeadTabs(overview);
  renderPlugins(overview);
  renderFailures(overview);
  renderBatches(overview);
  renderJobs(overview);
  document.body.dataset.updated = String(overview.at_ms);
}

function live(on, text) {
  document.getElementById("live").className = on ? "pill pill-on" : "pill pill-off";
  document.getElementById("live-text").textContent = text;
}

function connect() {
  const events = new EventSource("/api/events");
  events.addEventListener("overview", (message) => {
    live(true, "live");
    render(JSON.parse(message.data));
  });
  // A browser gives up on an answer other than a stream: an expired session's 401, or a
  // 503 when this session follows the host in too many pages.
  events.addEventListener("error", () => live(false,
    events.readyState === EventSource.CLOSED ? "stopped: reload, or sign in again with `jobhost dashboard`" : "reconnecting"));
}

document.addEventListener("DOMContentLoaded", async () => {
  wireDeadButtons();
  wireCancelForm();
  await loadSession();
  // The host shows its state only to a session: `jobhost dashboard` prints a link that opens one.
  if (!state.canChange) return live(false, "sign in: run `jobhost dashboard`");
  connect();
  loadSchedules();
  setInterval(loadSchedules, SCHEDULES_EVERY_MS);
});
