// The Sluice web console: a small single-page app over the admin API (/api/*, described at
// /api/openapi.json). No framework and no external fetches; every string from the server is
// put in the page as text, never as HTML.
"use strict";

const main = document.getElementById("main");
const flashBox = document.getElementById("flash");
const clusterSelect = document.getElementById("cluster");
let refreshTimer = null;

// ---------- helpers ----------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function flash(message, isError) {
  flashBox.textContent = message || "";
  flashBox.className = isError ? "error" : "";
}

function cluster() {
  return localStorage.getItem("sluice.cluster") || "local";
}

function apiBase() {
  const c = cluster();
  return c === "local" ? "" : "/api/clusters/" + encodeURIComponent(c) + "/proxy";
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// Calls the admin API of the selected cluster (or of this broker when `local` is set).
async function api(method, path, body, local) {
  const headers = {};
  const token = sessionStorage.getItem("sluice.token");
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch((local ? "" : apiBase()) + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401 && !(local === false)) {
    showTokenForm();
    throw new ApiError(401, "this admin port needs a token");
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = { error: text }; }
  if (!res.ok) throw new ApiError(res.status, (data && data.error) || res.statusText);
  return data;
}

const fmt = {
  int: (n) => (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US"),
  rate: (n) => n >= 100 ? Math.round(n).toLocaleString("en-US") : (Math.round(n * 10) / 10).toString(),
  bytes(n) {
    if (n === null || n === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  },
  time: (ms) => new Date(ms).toISOString().replace("T", " ").replace("Z", ""),
  duration(ms) {
    if (ms === null || ms === undefined) return "–";
    const s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400), hh = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return (d ? d + "d " : "") + (d || hh ? hh + "h " : "") + m + "m " + (s % 60) + "s";
  },
};

function table(columns, rows, opts) {
  const head = h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.title)));
  const body = rows.map((r) => h("tr", {}, columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(r)))));
  return h("div", { class: "scroll" }, h("table", { "aria-label": opts && opts.label }, h("thead", {}, head),
    h("tbody", {}, body.length ? body : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, (opts && opts.empty) || "None")))));
}

function card(k, v, cls) {
  return h("div", { class: "card" }, h("div", { class: "v " + (cls || "") }, v), h("div", { class: "k" }, k));
}

function link(href, text) { return h("a", { href }, text); }

// A line chart as SVG: series = [{name, color, points: [[t_ms, value|null], ...]}].
function chart(title, series, unit) {
  const W = 420, H = 170, L = 44, B = 20, T = 8, R = 10;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  const all = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
  const now = Date.now();
  const t0 = now - 15 * 60 * 1000;
  const max = Math.max(1e-9, ...all.map((p) => p[1]));
  const top = niceCeil(max);
  const x = (t) => L + (W - L - R) * Math.max(0, (t - t0)) / (now - t0);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const add = (name, attrs, text) => {
    const el = document.createElementNS(ns, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el);
  };
  for (const f of [0, 0.5, 1]) {
    add("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), stroke: "#e3e6ea" });
    add("text", { x: L - 4, y: y(top * f) + 4, "text-anchor": "end", "font-size": 11, fill: "#5b6470" }, short(top * f));
  }
  for (const [label, t] of [["-15m", t0], ["-10m", now - 600000], ["-5m", now - 300000], ["now", now]]) {
    add("text", { x: x(t), y: H - 4, "text-anchor": label === "now" ? "end" : "middle", "font-size": 11, fill: "#5b6470" }, label);
  }
  for (const s of series) {
    let d = "";
    let pen = false;
    for (const [t, v] of s.points) {
      if (v === null || t < t0) { pen = false; continue; }
      d += (pen ? "L" : "M") + x(t).toFixed(1) + " " + y(v).toFixed(1);
      pen = true;
    }
    if (d) add("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.6 });
    const last = s.points.filter((p) => p[1] !== null && p[0] >= t0).slice(-1)[0];
    if (last) add("circle", { cx: x(last[0]), cy: y(last[1]), r: 2.5, fill: s.color });
  }
  const latest = series.map((s) => {
    const last = s.points.filter((p) => p[1] !== null).slice(-1)[0];
    return s.name + " " + (last ? short(last[1]) : "–") + " " + unit;
  }).join(", ");
  svg.setAttribute("aria-label", title + ": " + latest);
  return h("div", { class: "chart" }, h("h3", {}, title + (unit ? " (" + unit + ")" : "")), svg,
    h("div", { class: "legend" }, series.map((s) => h("span", {}, h("i", { style: "background:" + s.color }), latest.split(", ")[series.indexOf(s)]))));
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function short(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  if (v >= 10 || v === 0) return Math.round(v).toString();
  return Number(v.toPrecision(2)).toString();
}

function every(ms, fn) {
  stopRefresh();
  refreshTimer = setInterval(() => { if (!document.hidden) fn().catch(() => {}); }, ms);
}

function stopRefresh() {
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = null;
}

function render(...nodes) {
  main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

function parseLines(text) {
  const out = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf("=");
    if (i <= 0) throw new Error("each line must be name=value: '" + line + "'");
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

// Runs a form action, reporting its error in the flash line.
function guarded(fn) {
  return async (ev) => {
    if (ev) ev.preventDefault();
    try { await fn(ev); } catch (e) { flash(e.message, true); }
  };
}

// ---------- token ----------

function showTokenForm() {
  stopRefresh();
  // Already asking: a page's other requests answered 401 too. Drawing the form again would
  // wipe what the user is typing (seen as a sign-in click that did nothing).
  if (document.getElementById("token")) return;
  const input = h("input", { type: "password", id: "token", autocomplete: "current-password", required: true });
  render(h("h1", {}, "Admin token"),
    h("p", {}, "This admin port needs its token (SLUICE_ADMIN_TOKEN). It is kept for this browser tab only."),
    h("form", { onsubmit: (ev) => { ev.preventDefault(); sessionStorage.setItem("sluice.token", input.value); route(); } },
      h("label", {}, "Token", input), h("button", { type: "submit" }, "Sign in")));
  input.focus();
}

// ---------- pages ----------

async function overviewPage() {
  const [ov, hist, relays] = await Promise.all([api("GET", "/api/overview"), api("GET", "/api/overview/history"),
    api("GET", "/api/outbox")]);
  const pts = hist.points;
  const series = (key, scale) => pts.map((p) => [p.t_ms, p[key] === null ? null : p[key] * (scale || 1)]);
  const n = ov.nodes[0];
  const missing = pts.length ? pts[pts.length - 1].nodes_missing : 0;
  render(
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      card("Cluster id", ov.cluster_id, "long"),
      card("Controller", "node " + ov.controller_id),
      card("Topics", fmt.int(ov.topics)),
      card("Partitions", fmt.int(ov.partitions)),
      card("Under-replicated", fmt.int(ov.under_replicated_partitions), ov.under_replicated_partitions ? "bad" : ""),
      card("Offline partitions", fmt.int(ov.offline_partitions), ov.offline_partitions ? "bad" : ""),
      card("Consumer groups", fmt.int(ov.groups)),
      card("Connections", fmt.int(ov.connections))),
    h("h2", {}, ov.nodes.length > 1 ? "Traffic of the cluster, last 15 minutes" : "Traffic, last 15 minutes"),
    missing ? h("p", { class: "muted" }, missing + (missing === 1 ? " node has" : " nodes have") +
      " not reported its traffic for the last point (no answer in time, just restarted, or an older version): the charts leave it out") : null,
    h("div", { class: "charts" },
      chart("Messages", [
        { name: "produce", color: "#0b63c4", points: series("produce_msgs_per_s") },
        { name: "consume", color: "#1e7b34", points: series("consume_msgs_per_s") }], "msg/s"),
      chart("Throughput", [
        { name: "produce", color: "#0b63c4", points: series("produce_bytes_per_s", 1 / 1048576) },
        { name: "consume", color: "#1e7b34", points: series("consume_bytes_per_s", 1 / 1048576) }], "MB/s"),
      chart(ov.nodes.length > 1 ? "Produce latency P99 on this node" : "Produce latency P99", [
        { name: "P99", color: "#b3261e", points: series("produce_p99_us", 1 / 1000) }], "ms")),
    h("h2", {}, "Nodes"),
    table([
      { title: "Id", cell: (r) => r.id },
      { title: "Kafka address", cell: (r) => r.kafka_address },
      { title: "Admin", cell: (r) => r.admin_address === null ? "–" : r.admin_address },
      { title: "Rack", cell: (r) => r.rack === null ? "–" : r.rack },
      { title: "Role", cell: (r) => r.roles.join(", ") },
      { title: "Status", cell: (r) => h("span", { class: "badge " + (r.status === "online" ? "good" : "bad"), title: r.error || "" }, r.status) },
      { title: "Version", cell: (r) => r.version === null ? "–" : r.version },
      { title: "Uptime", cell: (r) => fmt.duration(r.uptime_ms) },
      { title: "Connections", num: true, cell: (r) => r.connections === null ? "–" : fmt.int(r.connections) },
      { title: "Data", num: true, cell: (r) => fmt.bytes(r.data_bytes) },
      { title: "Disk free", num: true, cell: (r) => r.disk_free_bytes === null ? "–" : fmt.bytes(r.disk_free_bytes) + " of " + fmt.bytes(r.disk_total_bytes) },
    ], ov.nodes, { label: "Nodes" }),
    ...(relays.length === 0 ? [] : [
      h("h2", {}, "Outbox relays"),
      table([
        { title: "Slot", cell: (r) => r.slot },
        { title: "Source", cell: (r) => r.source },
        { title: "Instance", cell: (r) => r.instance + (r.local ? " (this broker)" : "") },
        { title: "State", cell: (r) => r.silent
          ? h("span", { class: "badge bad", title: "last report " + fmt.duration(r.report_age_ms) + " ago, as " + r.state }, "silent")
          : h("span", { class: "badge " + (r.state === "active" || r.state === "standby" ? "good" : "bad"), title: r.last_error || "" }, r.state) },
        { title: "Position", cell: (r) => r.position },
        { title: "Rows published", num: true, cell: (r) => fmt.int(r.rows) },
        { title: "Last batch after commit", num: true, cell: (r) => r.lag_ms.toFixed(1) + " ms" },
        { title: "Behind", num: true, cell: (r) => fmt.int(r.pending_rows) + " rows, " + fmt.bytes(r.lag_bytes) },
        { title: "Took over", num: true, cell: (r) => fmt.int(r.activations) + "×" },
      ], relays, { label: "Outbox relays" })]),
  );
  return n;
}

async function topicsPage() {
  const topics = await api("GET", "/api/topics");
  const showInternal = sessionStorage.getItem("sluice.internal") === "1";
  const name = h("input", { id: "new-topic-name", name: "name", required: true, pattern: "[A-Za-z0-9._-]+", maxlength: 249 });
  const parts = h("input", { id: "new-topic-partitions", type: "number", min: 1, value: 1, required: true });
  const repl = h("input", { id: "new-topic-replication", type: "number", min: 1, value: 1, required: true });
  const configs = h("textarea", { id: "new-topic-configs", placeholder: "retention.ms=86400000\ncleanup.policy=compact" });
  const create = guarded(async () => {
    const body = { name: name.value.trim(), partitions: Number(parts.value), replication_factor: Number(repl.value), configs: parseLines(configs.value) };
    await api("POST", "/api/topics", body);
    flash("Created topic " + body.name);
    location.hash = "#/topics/" + encodeURIComponent(body.name);
  });
  const listBox = h("div", { id: "topic-list" });
  const fill = (list) => listBox.replaceChildren(topicTable(list.filter((t) => showInternal || !t.internal)));
  fill(topics);
  render(
    h("h1", {}, "Topics"),
    h("label", { class: "inline" }, h("span", {}, h("input", { type: "checkbox", id: "show-internal", checked: showInternal,
      onchange: (ev) => { sessionStorage.setItem("sluice.internal", ev.target.checked ? "1" : "0"); route(); } }), " Show internal topics")),
    listBox,
    h("h2", {}, "Create a topic"),
    h("form", { onsubmit: create, "aria-label": "Create a topic" },
      h("label", {}, "Name", name), h("label", {}, "Partitions", parts), h("label", {}, "Replication factor", repl),
      h("label", {}, "Configs (name=value per line)", configs), h("button", { type: "submit" }, "Create topic")),
  );
  every(3000, async () => fill(await api("GET", "/api/topics")));
}

function topicTable(rows) {
  return table([
    { title: "Name", cell: (t) => link("#/topics/" + encodeURIComponent(t.name), t.name) },
    { title: "Partitions", num: true, cell: (t) => t.partitions },
    { title: "Replication", num: true, cell: (t) => t.replication_factor },
    { title: "Size", num: true, cell: (t) => fmt.bytes(t.size_bytes) },
    { title: "Messages", num: true, cell: (t) => fmt.int(t.messages) },
    { title: "Produce msg/s", num: true, cell: (t) => fmt.rate(t.produce_msgs_per_s) },
  ], rows, { label: "Topics", empty: "No topics yet" });
}

async function topicPage(nameArg) {
  const t = await api("GET", "/api/topics/" + encodeURIComponent(nameArg));
  const overrides = t.configs.filter((c) => c.source === "topic").map((c) => c.name + "=" + c.value).join("\n");
  const cfgArea = h("textarea", { id: "topic-configs", rows: 6 }, overrides);
  const saveConfigs = guarded(async () => {
    await api("PUT", "/api/topics/" + encodeURIComponent(t.name) + "/configs", { configs: parseLines(cfgArea.value) });
    flash("Saved the configs of " + t.name);
    await topicPage(t.name);
  });
  const count = h("input", { id: "partition-count", type: "number", min: t.partitions + 1, value: t.partitions + 1 });
  const grow = guarded(async () => {
    await api("POST", "/api/topics/" + encodeURIComponent(t.name) + "/partitions", { count: Number(count.value) });
    flash(t.name + " now has " + count.value + " partitions");
    await topicPage(t.name);
  });
  const purgePart = h("select", { id: "purge-partition" }, h("option", { value: "" }, "all partitions"),
    t.partition_table.map((p) => h("option", { value: p.partition }, "partition " + p.partition)));
  const purgeBefore = h("input", { id: "purge-before", type: "number", min: 0, placeholder: "everything", size: 12 });
  const purgeSure = h("input", { id: "purge-sure", type: "checkbox" });
  const purgeButton = h("button", { type: "submit", class: "danger", disabled: true }, "Delete records");
  purgeSure.addEventListener("change", () => { purgeButton.disabled = !purgeSure.checked; });
  const purge = guarded(async () => {
    const body = { before_offset: purgeBefore.value === "" ? -1 : Number(purgeBefore.value) };
    if (purgePart.value !== "") body.partition = Number(purgePart.value);
    if (body.partition === undefined && body.before_offset !== -1) throw new Error("an offset needs a partition: pick one, or leave the offset empty to delete everything");
    const after = await api("POST", "/api/topics/" + encodeURIComponent(t.name) + "/delete-records", body);
    flash("Deleted records of " + t.name + ": log start now " +
      after.partition_table.filter((p) => body.partition === undefined || p.partition === body.partition).map((p) => p.partition + ":" + p.log_start_offset).join(", "));
    await topicPage(t.name);
  });
  const confirmBox = h("input", { id: "delete-confirm", autocomplete: "off", "aria-describedby": "delete-help" });
  const deleteButton = h("button", { type: "submit", class: "danger", disabled: true }, "Delete topic");
  confirmBox.addEventListener("input", () => { deleteButton.disabled = confirmBox.value !== t.name; });
  const del = guarded(async () => {
    if (confirmBox.value !== t.name) return;
    await api("DELETE", "/api/topics/" + encodeURIComponent(t.name) + "?confirm=" + encodeURIComponent(confirmBox.value));
    flash("Deleted topic " + t.name);
    location.hash = "#/topics";
  });
  render(
    h("p", {}, link("#/topics", "← Topics")),
    h("h1", {}, "Topic " + t.name),
    h("div", { class: "cards" },
      card("Partitions", t.partitions), card("Replication", t.replication_factor), card("Size", fmt.bytes(t.size_bytes)),
      card("Messages", fmt.int(t.messages)), card("Produce msg/s", fmt.rate(t.produce_msgs_per_s))),
    h("p", {}, link("#/messages?topic=" + encodeURIComponent(t.name), "Browse messages")),
    h("h2", {}, "Partitions"),
    table([
      { title: "Partition", num: true, cell: (p) => p.partition },
      { title: "Leader", num: true, cell: (p) => p.leader },
      { title: "Replicas", cell: (p) => p.replicas.join(", ") },
      { title: "In sync", cell: (p) => p.in_sync_replicas.join(", ") },
      // Replicated partitions: each follower as its leader sees it (records behind, time since
      // it last had everything).
      t.replication_factor > 1 && { title: "Follower lag", cell: (p) => p.follower_lag.length === 0 ? "–" : p.follower_lag.flatMap((f) => [
          h("span", { class: "badge " + (f.in_sync ? "good" : "bad"), title: f.in_sync ? "in sync" : "out of sync" },
            "node " + f.node + ": " + (f.records === null ? "?" : fmt.int(f.records)) + " rec, " + (f.ms / 1000).toFixed(1) + " s"), " "]) },
      { title: "Log start", num: true, cell: (p) => fmt.int(p.log_start_offset) },
      { title: "Log end", num: true, cell: (p) => fmt.int(p.log_end_offset) },
      { title: "Size", num: true, cell: (p) => fmt.bytes(p.size_bytes) },
      { title: "Segments", num: true, cell: (p) => p.segments === null ? "–" : p.segments },
      { title: "Status", cell: (p) => h("span", { class: "badge " + (p.offline ? "bad" : "good") }, p.offline ? "offline" : "online") },
    ].filter(Boolean), t.partition_table, { label: "Partitions" }),
    h("h2", {}, "Configs"),
    table([
      { title: "Name", cell: (c) => h("span", { title: c.doc }, c.name) },
      { title: "Value", cell: (c) => c.value },
      { title: "Source", cell: (c) => h("span", { class: "badge " + (c.source === "topic" ? "warn" : "") }, c.source) },
    ], t.configs, { label: "Configs" }),
    t.internal ? h("p", { class: "muted" }, "An internal topic: its configs, partitions and data are the broker's.") : [
      h("h2", {}, "Edit configs"),
      h("form", { onsubmit: saveConfigs, "aria-label": "Edit configs" },
        h("label", {}, "Overrides (name=value per line; remove a line to return to the default)", cfgArea),
        h("button", { type: "submit" }, "Save configs")),
      h("h2", {}, "Add partitions"),
      h("form", { onsubmit: grow, "aria-label": "Add partitions" }, h("label", {}, "New partition count", count),
        h("button", { type: "submit" }, "Add partitions")),
      h("h2", {}, "Delete records"),
      h("form", { onsubmit: purge, "aria-label": "Delete records" },
        h("label", {}, "Partition", purgePart),
        h("label", {}, "Below offset (empty: everything up to the high watermark)", purgeBefore),
        h("label", { class: "check" }, purgeSure, " I understand these records cannot be brought back"),
        purgeButton),
      h("h2", {}, "Delete"),
      h("form", { onsubmit: del, "aria-label": "Delete topic" },
        h("label", {}, h("span", { id: "delete-help" }, "Type the topic's name, " + t.name + ", to delete it and all its data"), confirmBox),
        deleteButton),
    ],
  );
}

async function groupsPage() {
  const box = h("div", { id: "group-list" });
  const fill = (groups) => box.replaceChildren(table([
      // A group's page is on its coordinator's console (every node lists every group).
      { title: "Group", cell: (g) => link((g.admin_address && g.admin_address !== location.origin ? g.admin_address + "/" : "")
          + "#/groups/" + encodeURIComponent(g.group), g.group) },
      { title: "Coordinator", num: true, cell: (g) => g.node },
      { title: "State", cell: (g) => h("span", { class: "badge " + (g.state === "Stable" ? "good" : "") }, g.state) },
      { title: "Protocol", cell: (g) => g.protocol_type || "–" },
      { title: "Members", num: true, cell: (g) => g.members },
      { title: "Lag", num: true, cell: (g) => fmt.int(g.lag) },
    ], groups, { label: "Consumer groups", empty: "No consumer groups" }));
  fill(await api("GET", "/api/groups"));
  render(h("h1", {}, "Consumer groups"), box);
  every(3000, async () => fill(await api("GET", "/api/groups")));
}

async function groupPage(id) {
  const path = "/api/groups/" + encodeURIComponent(id);
  const [g, topics] = await Promise.all([api("GET", path), api("GET", "/api/topics")]);
  const topicNames = [...new Set([...g.offsets.map((o) => o.topic), ...topics.filter((t) => !t.internal).map((t) => t.name)])];
  const topicSel = h("select", { id: "reset-topic" }, topicNames.map((n) => h("option", { value: n }, n)));
  const partsIn = h("input", { id: "reset-partitions", placeholder: "all", size: 8 });
  const toSel = h("select", { id: "reset-to" }, ["earliest", "latest", "offset", "timestamp", "shift"].map((v) => h("option", { value: v }, v)));
  const valueIn = h("input", { id: "reset-value", placeholder: "offset, ms or ±n", size: 14 });
  const preview = h("div", { id: "reset-preview" });
  const applyBtn = h("button", { type: "button", class: "danger", disabled: true, id: "reset-apply" }, "Apply reset");
  const resetBody = (dry) => {
    const partitions = partsIn.value.trim() ? partsIn.value.split(",").map((s) => {
      const n = Number(s.trim());
      if (!Number.isInteger(n)) throw new Error("partitions must be numbers separated by commas");
      return n;
    }) : [];
    const body = { topic: topicSel.value, partitions, to: toSel.value, dry_run: dry };
    if (["offset", "timestamp", "shift"].includes(toSel.value)) {
      const v = Number(valueIn.value);
      if (valueIn.value.trim() === "" || !Number.isInteger(v)) throw new Error(toSel.value + " needs a whole number");
      body.value = v;
    }
    return body;
  };
  let previewed = null;
  for (const el of [topicSel, partsIn, toSel, valueIn]) el.addEventListener("input", () => { applyBtn.disabled = true; previewed = null; });
  const doPreview = guarded(async () => {
    const body = resetBody(true);
    const r = await api("POST", path + "/reset-offsets", body);
    previewed = JSON.stringify(body);
    preview.replaceChildren(h("h3", {}, "Preview"), table([
      { title: "Topic", cell: (c) => c.topic }, { title: "Partition", num: true, cell: (c) => c.partition },
      { title: "Current", num: true, cell: (c) => fmt.int(c.current_offset) }, { title: "New", num: true, cell: (c) => fmt.int(c.new_offset) },
    ], r.changes, { label: "Offset reset preview" }));
    applyBtn.disabled = false;
  });
  applyBtn.addEventListener("click", guarded(async () => {
    const body = resetBody(false);
    if (previewed !== JSON.stringify({ ...body, dry_run: true })) throw new Error("preview the reset again first");
    const r = await api("POST", path + "/reset-offsets", body);
    flash("Reset " + r.changes.length + " partition(s) of group " + id);
    await live.refresh();
    preview.replaceChildren();
    applyBtn.disabled = true;
  }));
  const live = h("div", { id: "group-live" });
  live.refresh = async () => {
    const [g, lag] = await Promise.all([api("GET", path), api("GET", path + "/lag-history")]);
    live.replaceChildren(...groupLive(g, lag));
  };
  await live.refresh();
  render(
    h("p", {}, link("#/groups", "← Consumer groups")),
    h("h1", {}, "Group " + g.group),
    live,
    h("h2", {}, "Reset offsets"),
    h("form", { onsubmit: doPreview, "aria-label": "Reset offsets" },
      h("label", {}, "Topic", topicSel), h("label", {}, "Partitions", partsIn), h("label", {}, "To", toSel),
      h("label", {}, "Value", valueIn), h("button", { type: "submit", class: "secondary" }, "Preview"), applyBtn),
    preview,
  );
  every(2000, live.refresh);
}

function groupLive(g, lag) {
  const totalLag = g.offsets.reduce((s, o) => s + (o.lag || 0), 0);
  return [
    h("div", { class: "cards" }, card("State", g.state), card("Members", g.members.length), card("Generation", g.generation),
      card("Protocol", g.protocol || "–"), card("Total lag", h("span", { id: "total-lag" }, fmt.int(totalLag)))),
    h("div", { class: "charts" }, chart("Lag", [{ name: "lag", color: "#9a6700", points: lag.map((p) => [p.t_ms, p.lag]) }], "messages")),
    h("h2", {}, "Members"),
    table([
      { title: "Member", cell: (m) => m.member_id }, { title: "Client", cell: (m) => m.client_id },
      { title: "Host", cell: (m) => m.client_host },
      { title: "Partitions", cell: (m) => m.assignment.map(([t, ps]) => t + ": " + ps.join(", ")).join("; ") || "–" },
    ], g.members, { label: "Members", empty: "No members (the group is empty)" }),
    h("h2", {}, "Offsets and lag"),
    table([
      { title: "Topic", cell: (o) => o.topic }, { title: "Partition", num: true, cell: (o) => o.partition },
      { title: "Committed", num: true, cell: (o) => fmt.int(o.committed_offset) },
      { title: "Log end", num: true, cell: (o) => fmt.int(o.log_end_offset) },
      { title: "Lag", num: true, cell: (o) => fmt.int(o.lag) },
    ], g.offsets, { label: "Offsets", empty: "No committed offsets" }),
    g.members.length ? h("p", { class: "muted" }, "Only a group without members can be reset: stop its consumers first.") : null,
  ];
}

// Key/value display: text, pretty JSON or hex.
function showBytes(b, format) {
  if (!b) return h("span", { class: "muted" }, "null");
  const raw = atob(b.base64);
  let text;
  if (format === "hex") {
    text = Array.from(raw, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
  } else if (format === "json" && b.text !== null) {
    try { text = JSON.stringify(JSON.parse(b.text), null, 2); } catch (_) { text = b.text; }
  } else {
    text = b.text !== null ? b.text : "(binary, " + b.size + " bytes: choose hex)";
  }
  return h("pre", {}, text + (b.truncated ? "\n… (" + b.size + " bytes, first 64 KiB shown)" : ""));
}

async function messagesPage(params) {
  const topics = (await api("GET", "/api/topics")).filter((t) => !t.internal || params.get("topic") === t.name);
  const current = params.get("topic") || (topics[0] && topics[0].name) || "";
  const topicSel = h("select", { id: "browse-topic" }, topics.map((t) => h("option", { value: t.name, selected: t.name === current }, t.name)));
  const info = topics.find((t) => t.name === current);
  const partSel = h("select", { id: "browse-partition" },
    Array.from({ length: info ? info.partitions : 0 }, (_, i) => h("option", { value: i, selected: String(i) === (params.get("partition") || "0") }, i)));
  const fromSel = h("select", { id: "browse-from" }, ["newest", "oldest", "offset", "timestamp"].map((v) =>
    h("option", { value: v, selected: v === (params.get("from") || "newest") }, v)));
  const offsetIn = h("input", { id: "browse-offset", type: "number", min: 0, placeholder: "offset", value: params.get("offset") || "" });
  const timeIn = h("input", { id: "browse-time", type: "datetime-local", step: 1, value: params.get("time") || "" });
  const orderSel = h("select", { id: "browse-order" }, [["newest_first", "newest first"], ["oldest_first", "oldest first"]].map(([v, l]) =>
    h("option", { value: v, selected: v === (params.get("order") || "newest_first") }, l)));
  const limitIn = h("input", { id: "browse-limit", type: "number", min: 1, max: 500, value: params.get("limit") || 50 });
  const formatSel = h("select", { id: "browse-format" }, ["text", "json", "hex"].map((v) => h("option", { value: v, selected: v === (params.get("format") || "text") }, v)));
  const results = h("div", { id: "browse-results" });
  topicSel.addEventListener("change", () => { location.hash = "#/messages?topic=" + encodeURIComponent(topicSel.value); });

  const load = guarded(async () => {
    if (!topicSel.value) { results.replaceChildren(h("p", { class: "muted" }, "No topic to browse.")); return; }
    const q = new URLSearchParams({ from: fromSel.value, order: orderSel.value, limit: limitIn.value });
    if (fromSel.value === "offset") {
      if (offsetIn.value === "") throw new Error("enter an offset");
      q.set("value", offsetIn.value);
    }
    if (fromSel.value === "timestamp") {
      const t = Date.parse(timeIn.value);
      if (Number.isNaN(t)) throw new Error("enter a time");
      q.set("value", String(t));
    }
    const r = await api("GET", "/api/topics/" + encodeURIComponent(topicSel.value) + "/partitions/" + partSel.value + "/messages?" + q);
    const f = formatSel.value;
    results.replaceChildren(
      h("p", { class: "muted" }, `Partition ${r.partition}: offsets ${fmt.int(r.log_start_offset)} to ${fmt.int(r.high_watermark - 1)}; showing ${r.records.length}.`),
      table([
        { title: "Offset", num: true, cell: (m) => m.offset },
        { title: "Timestamp", cell: (m) => h("span", { title: m.timestamp_type }, fmt.time(m.timestamp)) },
        { title: "Key", cell: (m) => showBytes(m.key, f) },
        { title: "Value", cell: (m) => showBytes(m.value, f) },
        { title: "Headers", cell: (m) => m.headers.length ? h("pre", {}, m.headers.map((x) => x.key + ": " + (x.value ? (x.value.text !== null ? x.value.text : "0x" + Array.from(atob(x.value.base64), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("")) : "null")).join("\n")) : "–" },
      ], r.records, { label: "Messages", empty: "No records here" }));
  });

  const pKey = h("input", { id: "produce-key" });
  const pValue = h("textarea", { id: "produce-value" });
  const pHeaders = h("textarea", { id: "produce-headers", placeholder: "name=value per line" });
  const pPart = h("select", { id: "produce-partition" }, h("option", { value: "" }, "by key"),
    Array.from({ length: info ? info.partitions : 0 }, (_, i) => h("option", { value: i }, i)));
  const produce = guarded(async () => {
    const headers = Object.entries(parseLines(pHeaders.value)).map(([key, value]) => ({ key, value }));
    const body = { value: pValue.value, headers };
    if (pKey.value !== "") body.key = pKey.value;
    if (pPart.value !== "") body.partition = Number(pPart.value);
    const r = await api("POST", "/api/topics/" + encodeURIComponent(topicSel.value) + "/messages", body);
    flash(`Wrote the record to partition ${r.partition} at offset ${r.offset}`);
    await load();
  });

  render(
    h("h1", {}, "Messages"),
    h("form", { onsubmit: load, "aria-label": "Browse messages" },
      h("label", {}, "Topic", topicSel), h("label", {}, "Partition", partSel), h("label", {}, "From", fromSel),
      h("label", {}, "Offset", offsetIn), h("label", {}, "Time (UTC)", timeIn), h("label", {}, "Order", orderSel),
      h("label", {}, "Limit", limitIn), h("label", {}, "Show as", formatSel), h("button", { type: "submit", id: "browse-load" }, "Load")),
    results,
    h("h2", {}, "Produce a test record"),
    h("form", { onsubmit: produce, "aria-label": "Produce a test record" },
      h("label", {}, "Partition", pPart), h("label", {}, "Key", pKey), h("label", {}, "Value", pValue),
      h("label", {}, "Headers", pHeaders), h("button", { type: "submit", id: "produce-send" }, "Send")),
  );
  formatSel.addEventListener("change", load);
  if (topicSel.value) await load();
}

async function clustersPage() {
  const clusters = await api("GET", "/api/clusters", undefined, true);
  const name = h("input", { id: "cluster-name", required: true });
  const url = h("input", { id: "cluster-url", required: true, placeholder: "http://10.0.0.5:8080" });
  const token = h("input", { id: "cluster-token", type: "password", autocomplete: "off" });
  const add = guarded(async () => {
    await api("POST", "/api/clusters", { name: name.value.trim(), admin_url: url.value.trim(), token: token.value || undefined }, true);
    flash("Registered cluster " + name.value.trim());
    await loadClusters();
    await clustersPage();
  });
  render(
    h("h1", {}, "Clusters"),
    h("p", { class: "muted" }, "This console can manage other Sluice clusters through their admin ports; pick one in the header."),
    table([
      { title: "Name", cell: (c) => c.name + (c.name === cluster() ? " (selected)" : "") },
      { title: "Admin address", cell: (c) => c.local ? "this broker" : c.admin_url },
      { title: "Token", cell: (c) => c.local ? "–" : (c.has_token ? "set" : "none") },
      { title: "", cell: (c) => c.local ? "" : h("button", { type: "button", class: "secondary", onclick: guarded(async () => {
        await api("DELETE", "/api/clusters/" + encodeURIComponent(c.name), undefined, true);
        if (cluster() === c.name) localStorage.setItem("sluice.cluster", "local");
        await loadClusters();
        await clustersPage();
      }) }, "Remove " + c.name) },
    ], clusters, { label: "Clusters" }),
    h("h2", {}, "Register a cluster"),
    h("form", { onsubmit: add, "aria-label": "Register a cluster" },
      h("label", {}, "Name", name), h("label", {}, "Admin address", url), h("label", {}, "Admin token", token),
      h("button", { type: "submit" }, "Register")),
  );
}

async function securityPage() {
  const [users, acls] = await Promise.all([api("GET", "/api/users"), api("GET", "/api/acls")]);
  const userName = h("input", { id: "user-name", required: true, autocomplete: "off" });
  const password = h("input", { id: "user-password", type: "password", required: true, minlength: 8, autocomplete: "new-password" });
  const addUser = guarded(async () => {
    await api("POST", "/api/users", { name: userName.value.trim(), password: password.value });
    flash("Saved user " + userName.value.trim());
    await securityPage();
  });
  const field = (id, opts) => h("select", { id }, opts.map((o) => h("option", { value: o }, o)));
  const rType = field("acl-type", ["topic", "group", "transactional-id", "cluster"]);
  const rName = h("input", { id: "acl-name", required: true, placeholder: "orders, * or kafka-cluster" });
  const pattern = field("acl-pattern", ["literal", "prefixed"]);
  const principal = h("input", { id: "acl-principal", required: true, placeholder: "User:alice" });
  const host = h("input", { id: "acl-host", value: "*" });
  const operation = field("acl-operation", ["Read", "Write", "Describe", "Create", "Delete", "Alter",
    "DescribeConfigs", "AlterConfigs", "ClusterAction", "IdempotentWrite", "All"]);
  const permission = field("acl-permission", ["Allow", "Deny"]);
  const addAcl = guarded(async () => {
    await api("POST", "/api/acls", { resource_type: rType.value, resource_name: rName.value.trim(),
      pattern_type: pattern.value, principal: principal.value.trim(), host: host.value.trim() || "*",
      operation: operation.value, permission: permission.value });
    flash("Added the ACL");
    await securityPage();
  });
  render(
    h("h1", {}, "Security"),
    h("h2", {}, "Users"),
    table([
      { title: "User", cell: (u) => u.name },
      { title: "Mechanisms", cell: (u) => u.mechanisms.join(", ") },
      { title: "", cell: (u) => h("button", { type: "button", class: "secondary", onclick: guarded(async () => {
        await api("DELETE", "/api/users/" + encodeURIComponent(u.name));
        flash("Deleted user " + u.name);
        await securityPage();
      }) }, "Delete " + u.name) },
    ], users, { label: "Users", empty: "No SASL users" }),
    h("form", { onsubmit: addUser, "aria-label": "Create a user" },
      h("label", {}, "User name", userName), h("label", {}, "Password (8 characters or more)", password),
      h("button", { type: "submit" }, "Save user")),
    h("h2", {}, "ACLs"),
    table([
      { title: "Resource", cell: (a) => a.resource_type + " " + a.resource_name + (a.pattern_type === "prefixed" ? "*" : "") },
      { title: "Principal", cell: (a) => a.principal },
      { title: "Host", cell: (a) => a.host },
      { title: "Operation", cell: (a) => a.operation },
      { title: "Permission", cell: (a) => h("span", { class: "badge " + (a.permission === "Allow" ? "good" : "warn") }, a.permission) },
      { title: "", cell: (a) => h("button", { type: "button", class: "secondary", onclick: guarded(async () => {
        await api("DELETE", "/api/acls", a);
        flash("Removed the ACL");
        await securityPage();
      }) }, "Remove") },
    ], acls, { label: "ACLs", empty: "No ACLs" }),
    h("form", { onsubmit: addAcl, "aria-label": "Add an ACL" },
      h("label", {}, "Resource type", rType), h("label", {}, "Resource name", rName), h("label", {}, "Pattern", pattern),
      h("label", {}, "Principal", principal), h("label", {}, "Host", host), h("label", {}, "Operation", operation),
      h("label", {}, "Permission", permission), h("button", { type: "submit" }, "Add ACL")),
  );
}

async function loadClusters() {
  try {
    const clusters = await api("GET", "/api/clusters", undefined, true);
    if (!clusters.some((c) => c.name === cluster())) localStorage.setItem("sluice.cluster", "local");
    clusterSelect.replaceChildren(...clusters.map((c) => h("option", { value: c.name, selected: c.name === cluster() }, c.name)));
  } catch (_) { /* shown by the page */ }
}

clusterSelect.addEventListener("change", () => {
  localStorage.setItem("sluice.cluster", clusterSelect.value);
  flash("Showing cluster " + clusterSelect.value);
  route();
});

// ---------- routing ----------

async function route() {
  stopRefresh();
  const hash = location.hash || "#/overview";
  const [pathPart, query] = hash.slice(1).split("?");
  const parts = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === "#/" + (parts[0] || "overview")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    switch (parts[0] || "overview") {
      case "overview":
        await overviewPage();
        every(2000, overviewPage);
        break;
      case "topics":
        if (parts[1]) await topicPage(parts[1]); else await topicsPage();
        break;
      case "groups":
        if (parts[1]) await groupPage(parts[1]); else await groupsPage();
        break;
      case "messages":
        await messagesPage(params);
        break;
      case "clusters":
        await clustersPage();
        break;
      case "security":
        await securityPage();
        break;
      default:
        render(h("h1", {}, "Not found"), h("p", {}, link("#/overview", "Overview")));
    }
  } catch (e) {
    if (e.status !== 401) render(h("h1", {}, "Error"), h("p", { role: "alert" }, e.message));
  }
}

window.addEventListener("hashchange", () => { flash(""); route().then(() => main.focus()); });
loadClusters().then(route);
