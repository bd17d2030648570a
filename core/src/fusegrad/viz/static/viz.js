// The VIZ page: reads trace.json (written by fusegrad/viz/recorder.py) and shows the kernels,
// each stage of their UOp graphs laid out by dagre, the diff between stages, the source and the
// realizes' schedules. Plain browser JavaScript, no build step.
"use strict";

// a graph bigger than this shows a neighbourhood of its last nodes, with "+" buttons that
// bring in a node's sources: dagre lays out a few hundred nodes in well under a second
const MAX_NODES = 400;
const EXPAND_STEP = 60;  // nodes added by one "+"
const FIRING_NODES = 40;  // a rule firing opens on its two nodes and this many around them
const KINDS = [
  ["memory", "#cfe0f3", /^(PARAM|BUFFER|DEFINE_LOCAL|DEFINE_REG|DEFINE_GLOBAL|LOAD|STORE|INDEX|BUFFERIZE|COPY|ASSIGN)$/],
  ["loop", "#cde8c6", /^(RANGE|END|SPECIAL|IF|ENDIF|BARRIER)$/],
  ["reduce", "#f6c9c9", /^(REDUCE_AXIS|REDUCE|WMMA)$/],
  ["movement", "#cde9e7", /^(RESHAPE|PERMUTE|EXPAND|PAD|SHRINK|FLIP|VIEW)$/],
  ["cast", "#f8ecb5", /^(CAST|BITCAST)$/],
  ["const", "#e6e3e1", /^(CONST|VCONST|DEFINE_VAR|BIND)$/],
  ["sink", "#e4d2e0", /^(SINK|KERNEL|NOOP|CONTIGUOUS|DETACH|CUSTOM_GRAD)$/],
  ["alu", "#fbdcbc", /./],
];
// firing: the rule firing of the stage shown (-1: the whole stage)
const state = { trace: null, kernel: -1, plan: -1, stage: 0, firing: -1, selected: -1, visible: null, matchOp: "" };
const $ = (id) => document.getElementById(id);

function kindColor(op) {
  for (const [, color, re] of KINDS) if (re.test(op)) return color;
  return "#ddd";
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function fmt(x, digits = 3) {
  if (x === undefined || x === null) return "";
  if (typeof x !== "number") return String(x);
  if (Math.abs(x) >= 1e9) return (x / 1e9).toFixed(1) + "G";
  if (Math.abs(x) >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (Math.abs(x) >= 1e4) return (x / 1e3).toFixed(1) + "k";
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

// ---- loading ---------------------------------------------------------------------------

async function main() {
  const response = await fetch("trace.json");
  const trace = await response.json();
  if (trace.format !== "fusegrad-viz") throw new Error("trace.json is not a fusegrad VIZ trace");
  trace.kernels = trace.kernels || [];
  trace.plans = trace.plans || [];
  trace.realizes = trace.realizes || [];
  trace.replays = trace.replays || [];
  trace.profile = trace.profile || [];
  state.trace = trace;
  $("summary").textContent = `${trace.kernels.length} kernels, ${trace.realizes.length} realizes` +
    (trace.replays.length ? `, ${trace.replays.length} TinyJit replays` : "") +
    `, ${trace.profile.filter((e) => e.ph === "X").length} profile events`;
  listKernels();
  listRealizes();
  wireControls();
  if (trace.kernels.length) selectKernel(0);
  else if (trace.profile.length) showTab("timeline");
}

// ---- the lists -------------------------------------------------------------------------

function listKernels() {
  const rows = state.trace.kernels.map((k, i) => {
    const size = k.global_size ? k.global_size.join("×") : "";
    return `<tr class="row" data-kernel="${i}"><td>${esc(k.name)}</td><td>${esc(size)}</td>` +
      `<td class="num">${fmt(k.launch_ms)}</td><td class="num">${fmt(k.flops)}</td>` +
      `<td class="num">${fmt(k.bytes)}</td><td class="num">${k.launches || 0}</td></tr>`;
  });
  $("kernels").innerHTML = `<table><tr><th>kernel</th><th>global size</th><th class="num">ms</th>` +
    `<th class="num">FLOPs</th><th class="num">bytes</th><th class="num">runs</th></tr>${rows.join("")}</table>`;
  $("kernels").onclick = (e) => {
    const row = e.target.closest("tr[data-kernel]");
    if (row) selectKernel(+row.dataset.kernel);
  };
}

function listRealizes() {
  const { realizes, plans } = state.trace;
  const shown = realizes.slice(0, 500).map((r, i) => {
    const steps = plans[r.plan].steps;
    const ms = (r.step_ms || []).reduce((a, b) => a + (b || 0), 0);
    return `<tr class="row" data-plan="${r.plan}"><td>${i}</td><td>plan ${r.plan}</td>` +
      `<td class="num">${steps.length}</td><td class="num">${fmt(ms)}</td><td class="num">${fmt(r.at_ms, 1)}</td></tr>`;
  });
  const more = realizes.length > 500 ? `<p class="hint">and ${realizes.length - 500} more</p>` : "";
  $("realizes").innerHTML = `<table><tr><th>#</th><th>plan</th><th class="num">steps</th>` +
    `<th class="num">kernel ms</th><th class="num">at ms</th></tr>${shown.join("")}</table>${more}` +
    listReplays();
  $("realizes").onclick = (e) => {
    const row = e.target.closest("tr[data-plan]");
    if (row) selectPlan(+row.dataset.plan);
    const replay = e.target.closest("tr[data-replay]");
    if (replay) selectReplay(+replay.dataset.replay);
  };
}

// a TinyJit replay runs its captured kernels without a realize: listed apart, with its launches
function listReplays() {
  const { replays } = state.trace;
  if (!replays.length) return "";
  const shown = replays.slice(0, 500).map((r, i) =>
    `<tr class="row" data-replay="${i}"><td>${i}</td><td>${esc(r.name)}</td><td class="num">${r.launches.length}</td>` +
    `<td class="num">${fmt(r.ms)}</td><td class="num">${fmt(r.at_ms, 1)}</td></tr>`);
  const more = replays.length > 500 ? `<p class="hint">and ${replays.length - 500} more</p>` : "";
  return `<h3 class="hint">TinyJit replays</h3><table id="replays"><tr><th>#</th><th>function</th>` +
    `<th class="num">launches</th><th class="num">ms</th><th class="num">at ms</th></tr>${shown.join("")}</table>${more}`;
}

function selectReplay(i) {
  const r = state.trace.replays[i];
  state.plan = -1;
  state.kernel = -1;
  for (const row of $("realizes").querySelectorAll("tr.row"))
    row.classList.toggle("selected", row.dataset.replay === String(i));
  const rows = r.launches.map(([k, name, ms], j) => {
    const link = k >= 0 ? `<a class="link" data-kernel="${k}">${esc(name)}</a>` : esc(name);
    return `<tr><td>${j}</td><td>${link}</td><td class="num">${fmt(ms, 4)}</td></tr>`;
  });
  $("head").innerHTML = `<h2 id="replay-name">TinyJit replay of ${esc(r.name)}: ${r.launches.length} launches, ` +
    `${fmt(r.ms)} ms, at ${fmt(r.at_ms, 1)} ms</h2><table><tr><th>#</th><th>kernel</th><th class="num">ms</th></tr>` +
    `${rows.join("")}</table>`;
  $("head").onclick = (e) => {
    const a = e.target.closest("[data-kernel]");
    if (a) selectKernel(+a.dataset.kernel);
  };
  $("stepper").hidden = true;
  $("firing-stepper").hidden = true;
  $("viewport").innerHTML = "";
  $("graph-note").textContent = "a replay runs kernels recorded before: pick one to see its graph";
}

function markSelected(container, attr, value) {
  for (const row of $(container).querySelectorAll("tr.row"))
    row.classList.toggle("selected", row.dataset[attr] === String(value));
}

function showTab(name) {
  for (const b of document.querySelectorAll("#sidebar .tabs button"))
    b.classList.toggle("active", b.dataset.tab === name);
  $("kernels").hidden = name !== "kernels";
  $("realizes").hidden = name !== "realizes";
  $("timeline-tab").hidden = name !== "timeline";
  $("panes").hidden = name === "timeline";
  $("timeline").hidden = name !== "timeline";
  if (name === "timeline") {
    $("head").innerHTML = `<h2>profile timeline</h2>`;
    $("stepper").hidden = true;
    $("firing-stepper").hidden = true;
    drawTimeline();
  }
}

function showSide(name) {
  for (const b of document.querySelectorAll("#side .tabs button"))
    b.classList.toggle("active", b.dataset.side === name);
  for (const id of ["source", "diff", "node"]) $(id).hidden = id !== name;
}

// ---- a kernel ---------------------------------------------------------------------------

function selectKernel(i, stage) {
  const k = state.trace.kernels[i];
  state.kernel = i;
  state.plan = -1;
  state.stage = stage ?? k.stages.length - 1;
  state.firing = -1;
  state.selected = -1;
  showTab("kernels");
  markSelected("kernels", "kernel", i);
  const fig = [
    ["renderer", k.renderer], ["global size", k.global_size && k.global_size.join("×")],
    ["local size", k.local_size && k.local_size.join("×")], ["FLOPs", fmt(k.flops)],
    ["bytes", fmt(k.bytes)], ["runs", k.launches], ["run ms", fmt(k.launch_ms)],
    ["codegen ms", fmt(k.codegen_ms)], ["compile ms", fmt(k.compile_ms)],
  ].filter(([, v]) => v !== undefined && v !== null && v !== "");
  const choices = Object.entries(k.choices || {}).map(([a, b]) => `<div><b>${esc(a)}</b>: <code>${esc(b)}</code></div>`);
  $("head").innerHTML = `<h2 id="kernel-name">${esc(k.name)}</h2><div class="figures">` +
    fig.map(([a, b]) => `<span>${esc(a)}: <b>${esc(b)}</b></span>`).join("") + `</div>` +
    (choices.length ? choices.join("") : `<div class="hint">optimiser: default loops</div>`);
  $("stepper").hidden = false;
  renderSource(k);
  showStage();
}

function stageNodes(k, s) {
  return k.stages[s].ids;
}

function showStage() {
  const k = state.trace.kernels[state.kernel];
  const s = state.stage, stage = k.stages[s];
  const ids = stageNodes(k, s);
  const before = s > 0 ? new Set(stageNodes(k, s - 1)) : null;
  const now = new Set(ids);
  const added = before ? ids.filter((id) => !before.has(id)) : [];
  const removed = before ? [...before].filter((id) => !now.has(id)).length : 0;
  $("stage-title").textContent = `${s + 1}/${k.stages.length}: ${stage.title}`;
  $("stage-title").dataset.stage = String(s);
  const rules = (stage.rules || []).map(([name, n]) => `${name} ×${n}`).join(", ");
  $("stage-info").textContent = `${ids.length} UOps` + (before ? `, +${added.length} new, −${removed} gone` : "") +
    `, ${fmt(stage.ms)} ms` + (stage.rules ? `; rules fired: ${rules || "none"}` : "");
  $("prev").disabled = s === 0;
  $("next").disabled = s === k.stages.length - 1;
  state.firing = -1;
  state.visible = null;
  showFiringStepper(stage);
  drawGraph(k.nodes, ids, new Set(added));
  renderDiff(k, s);
}

// ---- a stage's rule firings ---------------------------------------------------------------

// the second stepper: "whole stage", or one of the rule firings the recorder kept, in order
function showFiringStepper(stage) {
  const f = stage.firings, i = state.firing;
  $("firing-stepper").hidden = !f || !f.steps.length;
  if (!f || !f.steps.length) return;
  const cut = f.total > f.steps.length ? ` (the first ${f.steps.length} of ${f.total} kept: VIZ keeps ${f.kept} per stage)` : "";
  $("firing-title").textContent = i < 0 ? `whole stage · ${f.steps.length} rule firings` : `firing ${i + 1}/${f.steps.length}`;
  $("firing-title").dataset.firing = String(i);
  $("fprev").disabled = i < 0;
  $("fnext").disabled = i === f.steps.length - 1;
  $("fwhole").disabled = i < 0;
  if (i < 0) {
    $("firing-info").textContent = `Shift+→ steps through them${cut}`;
    return;
  }
  const nodes = state.trace.kernels[state.kernel].nodes;
  const [rule, before, after] = f.steps[i];
  const [name, place] = f.rules[rule];
  const at = place && place !== name ? ` at ${esc(place)}` : "";
  $("firing-info").innerHTML = `rule <code>${esc(name)}</code>${at}: ` +
    `<span class="replaced-id">%${before} ${esc(nodes[before][0])}</span> → ` +
    `<span class="replacement-id">%${after} ${esc(nodes[after][0])}</span>${esc(cut)}`;
}

// the nodes of a firing's graph: its node and its replacement, and every node below them
function firingNodes(nodes, before, after) {
  const seen = new Set([before, after]), stack = [before, after];
  while (stack.length) for (const s of nodes[stack.pop()][3]) if (s >= 0 && !seen.has(s)) { seen.add(s); stack.push(s); }
  return [...seen].sort((a, b) => a - b);
}

function currentFiring() {
  const k = state.trace.kernels[state.kernel];
  const [, before, after] = k.stages[state.stage].firings.steps[state.firing];
  return { before, after, marks: new Map([[before, "replaced"], [after, "replacement"]]) };
}

function showFiring(i) {
  const k = state.trace.kernels[state.kernel], stage = k.stages[state.stage];
  if (!stage.firings || i < -1 || i >= stage.firings.steps.length) return;
  if (i < 0) return showStage();
  state.firing = i;
  showFiringStepper(stage);
  const { before, after, marks } = currentFiring();
  const ids = firingNodes(k.nodes, before, after);
  state.visible = grow(k.nodes, new Set(ids), new Set(), [after, before], FIRING_NODES);
  drawGraph(k.nodes, ids, new Set(), marks);
}

function stepFiring(d) {
  if (state.kernel < 0) return;
  showFiring(state.firing + d);
}

// ---- the graph --------------------------------------------------------------------------

// the nodes to draw: all of a small graph, else the last MAX_NODES reached from its last nodes
function initialVisible(nodes, ids) {
  if (ids.length <= MAX_NODES) return new Set(ids);
  const inStage = new Set(ids), used = new Set();
  for (const id of ids) for (const s of nodes[id][3]) used.add(s);
  const roots = ids.filter((id) => !used.has(id));
  return grow(nodes, inStage, new Set(), roots.length ? roots : [ids[ids.length - 1]], MAX_NODES);
}

// breadth-first from `start` through sources, adding up to `limit` nodes of the stage
function grow(nodes, inStage, visible, start, limit) {
  const queue = [...start];
  let added = 0;
  while (queue.length && added < limit) {
    const id = queue.shift();
    if (visible.has(id) || !inStage.has(id)) continue;
    visible.add(id);
    added++;
    for (const s of nodes[id][3]) if (!visible.has(s)) queue.push(s);
  }
  return visible;
}

function nodeLabel(row) {
  const arg = row[2].length > 28 ? row[2].slice(0, 27) + "…" : row[2];
  return [row[0], `${row[1]}${arg ? " " + arg : ""}`];
}

// `marks`: a class for some nodes (a rule firing's node and its replacement)
function drawGraph(nodes, ids, fresh, marks = null) {
  const inStage = new Set(ids);
  if (!state.visible) state.visible = initialVisible(nodes, ids);
  const visible = state.visible;
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "TB", nodesep: 14, ranksep: 26, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const id of visible) {
    const lines = nodeLabel(nodes[id]);
    const width = 14 + 6.7 * Math.max(lines[0].length + String(id).length + 2, lines[1].length);
    g.setNode(String(id), { width, height: 34, lines });
  }
  const hidden = new Map();  // a drawn node -> how many of its sources are not drawn
  for (const id of visible)
    for (const s of nodes[id][3]) {
      if (visible.has(s)) g.setEdge(String(s), String(id));
      else if (inStage.has(s)) hidden.set(id, (hidden.get(id) || 0) + 1);
    }
  dagre.layout(g);
  const parts = [];
  for (const e of g.edges()) {
    const pts = g.edge(e).points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
    parts.push(`<polyline class="edge" points="${pts}" marker-end="url(#arrow)"/>`);
  }
  for (const v of g.nodes()) {
    const n = g.node(v), id = +v, row = nodes[id];
    const cls = ["node", fresh.has(id) ? "new" : "", (marks && marks.get(id)) || "", id === state.selected ? "selected" : "",
      state.matchOp && row[0] === state.matchOp ? "match" : ""].join(" ");
    const x = n.x - n.width / 2, y = n.y - n.height / 2;
    parts.push(`<g class="${cls}" data-id="${id}" data-op="${row[0]}"><rect x="${x}" y="${y}" width="${n.width}" ` +
      `height="${n.height}" fill="${kindColor(row[0])}"/><text x="${x + 6}" y="${y + 14}">` +
      `<tspan font-weight="bold">${esc(n.lines[0])}</tspan> %${id}</text>` +
      `<text x="${x + 6}" y="${y + 28}">${esc(n.lines[1])}</text></g>`);
    if (hidden.has(id))
      parts.push(`<g class="expander" data-expand="${id}"><circle class="expand" cx="${x + n.width}" cy="${y}" r="8"/>` +
        `<text class="expand-label" x="${x + n.width - 4}" y="${y + 4}">+</text></g>`);
  }
  const defs = `<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" ` +
    `markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#999"/></marker></defs>`;
  $("viewport").innerHTML = defs + parts.join("");
  const missing = ids.length - visible.size;
  $("graph-note").textContent = missing > 0
    ? `showing ${visible.size} of ${ids.length} UOps: "+" on a node brings in its sources`
    : `${visible.size} UOps`;
  // a graph too big to show whole opens on its last node (the store or sink it ends in)
  const last = marks ? [...marks.keys()].pop() : missing > 0 ? ids.filter((id) => visible.has(id)).pop() : undefined;
  fitView(g.graph(), last === undefined ? null : g.node(String(last)));
}

let view = { x: 0, y: 0, k: 1 };
function applyView() {
  $("viewport").setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
}

function fitView(box, focus) {
  const svg = $("graph").getBoundingClientRect();
  // the whole graph where it fits; else readable text around the focus
  const fit = Math.min(1, svg.width / (box.width + 20), svg.height / (box.height + 20)) || 1;
  const k = Math.max(fit, 0.6);
  if (fit < k && focus) view = { x: svg.width / 2 - focus.x * k, y: svg.height - 40 - focus.y * k, k };
  else view = { x: (svg.width - box.width * k) / 2, y: 10, k };
  applyView();
}

function wireGraph() {
  const svg = $("graph");
  let drag = null;
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = svg.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
    const f = Math.exp(-e.deltaY * 0.0015);
    view = { k: view.k * f, x: mx - (mx - view.x) * f, y: my - (my - view.y) * f };
    applyView();
  }, { passive: false });
  svg.addEventListener("mousedown", (e) => { drag = { x: e.clientX - view.x, y: e.clientY - view.y, moved: false }; });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    drag.moved = true;
    view.x = e.clientX - drag.x;
    view.y = e.clientY - drag.y;
    applyView();
  });
  window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
  svg.addEventListener("click", (e) => {
    if (drag && drag.moved) return;
    const expander = e.target.closest("[data-expand]");
    if (expander) return expand(+expander.dataset.expand);
    const node = e.target.closest(".node");
    if (node) selectNode(+node.dataset.id);
  });
}

function currentGraph() {
  if (state.kernel >= 0) {
    const k = state.trace.kernels[state.kernel];
    if (state.firing >= 0) {
      const { before, after, marks } = currentFiring();
      return { nodes: k.nodes, ids: firingNodes(k.nodes, before, after), kernel: k, marks };
    }
    return { nodes: k.nodes, ids: stageNodes(k, state.stage), kernel: k };
  }
  const p = state.trace.plans[state.plan];
  return { nodes: p.graph.nodes, ids: p.graph.ids, kernel: null };
}

function redraw() {
  const { nodes, ids, kernel, marks } = currentGraph();
  let fresh = new Set();
  if (marks) return drawGraph(nodes, ids, fresh, marks);
  if (kernel && state.stage > 0) {
    const before = new Set(stageNodes(kernel, state.stage - 1));
    fresh = new Set(ids.filter((id) => !before.has(id)));
  }
  drawGraph(nodes, ids, fresh);
}

function expand(id) {
  const { nodes, ids } = currentGraph();
  grow(nodes, new Set(ids), state.visible, nodes[id][3].filter((s) => !state.visible.has(s)), EXPAND_STEP);
  redraw();
}

function selectNode(id) {
  const { nodes, ids, kernel } = currentGraph();
  state.selected = id;
  if (!state.visible.has(id)) {  // bring it and its neighbourhood in
    const inStage = new Set(ids);
    grow(nodes, inStage, state.visible, [id], 12);
    for (const other of ids) if (nodes[other][3].includes(id)) state.visible.add(other);
  }
  redraw();
  const row = nodes[id];
  const users = ids.filter((u) => nodes[u][3].includes(id));
  const link = (i) => `<a class="link" data-node="${i}">%${i} ${esc(nodes[i][0])}</a>`;
  let stages = "", lines = [];
  if (kernel) {
    stages = kernel.stages.map((s, i) => (s.ids.includes(id) ? i + 1 : null)).filter((x) => x).join(", ");
    lines = Object.entries(kernel.lines || {}).filter(([, u]) => u === id).map(([n]) => +n);
  }
  $("node").innerHTML = `<dl><dt>%${id} ${esc(row[0])}</dt><dd>dtype ${esc(row[1])}</dd>` +
    `<dt>arg</dt><dd>${esc(row[2]) || "—"}</dd>` + (row[4] ? `<dt>shape</dt><dd>${esc(row[4])}</dd>` : "") +
    `<dt>sources</dt><dd>${row[3].map(link).join("") || "—"}</dd>` +
    `<dt>users in this stage</dt><dd>${users.map(link).join("") || "—"}</dd>` +
    (kernel ? `<dt>in stages</dt><dd>${stages}</dd><dt>source lines</dt><dd>${lines.join(", ") || "—"}</dd>` : "") + `</dl>`;
  $("node").onclick = (e) => {
    const a = e.target.closest("[data-node]");
    if (a) selectNode(+a.dataset.node);
  };
  for (const el of $("source").querySelectorAll(".line")) el.classList.toggle("hit", +el.dataset.uop === id && el.dataset.uop !== undefined);
  showSide("node");
}

// ---- source and diff ---------------------------------------------------------------------

const C_KEYWORDS = new Set(("for if else while return break continue switch case default do struct " +
  "typedef static inline const restrict volatile extern kernel __kernel __global __local global local " +
  "device threadgroup constant fn let var loop workgroup_size compute include pragma define").split(" "));
const C_TYPES = /^(void|bool|char|short|int|long|float|double|half|unsigned|signed|size_t|u?int(8|16|32|64)_t|u?char\d*|u?short\d*|u?int\d*|u?long\d*|float\d*|half\d*|double\d*|f32|f16|i32|u32|vec\d\w*|array|ptr)$/;

// a small highlighter for C-family (and WGSL) source: comments, preprocessor lines, numbers,
// keywords, type names and called functions
function highlight(line) {
  const re = /(\/\/.*$|\/\*.*?\*\/)|(^\s*#.*$)|(\b\d+\.?\d*(?:e[+-]?\d+)?[fuUlLh]*\b|\b0x[0-9a-fA-F]+[uUlL]*\b)|([A-Za-z_]\w*)(\s*\()?/g;
  let out = "", last = 0, m;
  while ((m = re.exec(line))) {
    out += esc(line.slice(last, m.index));
    last = re.lastIndex;
    if (m[1]) out += `<span class="tok-com">${esc(m[1])}</span>`;
    else if (m[2]) out += `<span class="tok-pre">${esc(m[2])}</span>`;
    else if (m[3]) out += `<span class="tok-num">${esc(m[3])}</span>`;
    else {
      const word = m[4];
      const cls = C_KEYWORDS.has(word) ? "tok-kw" : C_TYPES.test(word) ? "tok-ty" : m[5] ? "tok-fn" : "";
      out += cls ? `<span class="${cls}">${esc(word)}</span>` : esc(word);
      if (m[5]) out += esc(m[5]);
    }
  }
  return out + esc(line.slice(last));
}

function renderSource(k) {
  if (!k.source) {
    $("source").innerHTML = `<p class="hint">No source was rendered for this kernel.</p>`;
    return;
  }
  const lines = k.source.split("\n");
  const links = k.lines || {};
  $("source").innerHTML = `<div class="code">` + lines.map((text, i) => {
    const uop = links[String(i + 1)];
    const attrs = uop !== undefined ? ` class="line linked" data-uop="${uop}" title="UOp %${uop}"` : ` class="line"`;
    return `<div${attrs}><span class="ln">${i + 1}</span>${highlight(text)}</div>`;
  }).join("") + `</div>`;
  $("source").onclick = (e) => {
    const line = e.target.closest(".line.linked");
    if (!line) return;
    const uop = +line.dataset.uop;
    const k = state.trace.kernels[state.kernel];
    if (state.firing >= 0 || !stageNodes(k, state.stage).includes(uop)) {  // the linear program holds every linked UOp
      state.stage = k.stages.length - 1;
      showStage();
    }
    selectNode(uop);
    showSide("source");
  };
}

function listingLine(nodes, id) {
  const [op, dtype, arg, src] = nodes[id];
  return `%${id} ${op} ${dtype} (${src.map((s) => "%" + s).join(", ")}) ${arg}`;
}

// a line diff of two stages' listings: a node keeps its id while a stage leaves it alone, so
// lines are matched by id; a line of only the old stage is shown where it stood among the kept
function lineDiff(nodes, oldIds, newIds) {
  const keep = new Set(newIds), had = new Set(oldIds), out = [];
  let o = 0;
  for (const id of newIds) {
    if (had.has(id)) {
      while (o < oldIds.length && oldIds[o] !== id) {
        if (!keep.has(oldIds[o])) out.push(["-", oldIds[o]]);
        o++;
      }
      o++;
      out.push([" ", id]);
    } else out.push(["+", id]);
  }
  for (; o < oldIds.length; o++) if (!keep.has(oldIds[o])) out.push(["-", oldIds[o]]);
  return out;
}

function renderDiff(k, s) {
  if (s === 0) {
    $("diff").innerHTML = `<p class="hint">The first stage: nothing to compare with.</p>`;
    return;
  }
  const diff = lineDiff(k.nodes, stageNodes(k, s - 1), stageNodes(k, s));
  const changed = diff.map((d, i) => (d[0] !== " " ? i : -1)).filter((i) => i >= 0);
  const show = new Set();
  for (const i of changed) for (let j = i - 3; j <= i + 3; j++) show.add(j);  // 3 lines of context
  const html = [];
  let gap = false, shown = 0;
  for (let i = 0; i < diff.length && shown < 3000; i++) {
    if (!show.has(i)) { gap = true; continue; }
    if (gap) html.push(`<div class="gap">…</div>`);
    gap = false;
    shown++;
    const [mark, id] = diff[i];
    const cls = mark === "+" ? "add" : mark === "-" ? "del" : "";
    html.push(`<div class="${cls}">${mark} ${esc(listingLine(k.nodes, id))}</div>`);
  }
  const title = `${k.stages[s - 1].title} → ${k.stages[s].title}: ` +
    `${diff.filter((d) => d[0] === "+").length} added, ${diff.filter((d) => d[0] === "-").length} removed`;
  $("diff").innerHTML = `<pre class="diff"><div class="gap">${esc(title)}</div>` +
    (changed.length ? html.join("") : `<div>no change</div>`) + `</pre>`;
}

// ---- a realize's plan -------------------------------------------------------------------

function selectPlan(p) {
  const plan = state.trace.plans[p];
  state.plan = p;
  state.kernel = -1;
  showTab("realizes");
  state.selected = -1;
  state.visible = null;
  markSelected("realizes", "plan", p);
  const slots = (list) => list.map(([s, text]) => `<span title="${esc(text)}">${s}: ${esc(text)}</span>`).join("<br>");
  const times = state.trace.realizes.find((r) => r.plan === p)?.step_ms || [];
  const rows = plan.steps.map((step, i) => {
    const k = step.kind === "kernel" && step.kernel >= 0 ? state.trace.kernels[step.kernel] : null;
    const name = k ? `<a class="link" data-kernel="${step.kernel}">${esc(k.name)}</a>` : esc(step.kind);
    return `<tr><td>${i}</td><td>${name}</td><td>${esc(step.device || "")}</td><td>${slots(step.writes)}</td>` +
      `<td>${slots(step.reads)}</td><td class="num">${fmt(times[i])}</td><td>${esc(step.reason || "")}</td></tr>`;
  });
  $("head").innerHTML = `<h2>plan ${p}: ${plan.steps.length} steps, realized ${plan.realizes} time(s)</h2>` +
    `<table><tr><th>#</th><th>kernel</th><th>device</th><th>writes</th><th>reads</th><th class="num">ms</th>` +
    `<th>why the graph was cut here</th></tr>${rows.join("")}</table>`;
  $("head").onclick = (e) => {
    const a = e.target.closest("[data-kernel]");
    if (a) selectKernel(+a.dataset.kernel);
  };
  $("stepper").hidden = true;
  $("firing-stepper").hidden = true;
  $("source").innerHTML = `<p class="hint">The tensor graph of this realize (shapes in the Node tab).</p>`;
  $("diff").innerHTML = "";
  drawGraph(plan.graph.nodes, plan.graph.ids, new Set());
}

// ---- search -----------------------------------------------------------------------------

function search(q) {
  const { kernels, plans } = state.trace, out = [];
  const lower = q.toLowerCase(), upper = q.toUpperCase();
  kernels.forEach((k, i) => { if (k.name.toLowerCase().includes(lower)) out.push(["kernel", k.name, () => selectKernel(i)]); });
  kernels.forEach((k, i) => {
    const s = k.stages.length - 1;
    const n = k.stages[s].ids.filter((id) => k.nodes[id][0] === upper).length;
    if (n) out.push(["op", `${upper} ×${n} in ${k.name}`, () => { state.matchOp = upper; selectKernel(i, s); }]);
  });
  plans.forEach((p, i) => p.steps.forEach((step, j) => {
    const texts = [...step.writes, ...step.reads].map(([, t]) => t).filter((t) => t.toLowerCase().includes(lower));
    if (texts.length) {
      const name = step.kernel >= 0 ? kernels[step.kernel].name : step.kind;
      out.push(["buffer", `${texts[0]} — plan ${i} step ${j} (${name})`, () => selectPlan(i)]);
    }
  }));
  return out.slice(0, 200);
}

function wireControls() {
  for (const b of document.querySelectorAll("#sidebar .tabs button")) b.onclick = () => {
    const tab = b.dataset.tab;
    if (tab === "kernels" && state.kernel >= 0) selectKernel(state.kernel, state.stage);
    else if (tab === "realizes" && state.plan >= 0) selectPlan(state.plan);
    else showTab(tab);
  };
  for (const b of document.querySelectorAll("#side .tabs button")) b.onclick = () => showSide(b.dataset.side);
  $("prev").onclick = () => step(-1);
  $("next").onclick = () => step(1);
  $("fprev").onclick = () => stepFiring(-1);
  $("fnext").onclick = () => stepFiring(1);
  $("fwhole").onclick = () => showFiring(-1);
  // ← → step through the stages; with Shift, through the stage's rule firings; Esc: whole stage
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT") return;
    const d = e.key === "ArrowLeft" ? -1 : e.key === "ArrowRight" ? 1 : 0;
    if (d && e.shiftKey) stepFiring(d);
    else if (d) step(d);
    if (e.key === "Escape" && state.firing >= 0) showFiring(-1);
  });
  let results = [];
  $("search").addEventListener("input", () => {
    const q = $("search").value.trim();
    state.matchOp = "";
    results = q ? search(q) : [];
    $("results").hidden = !q;
    $("results").innerHTML = results.length
      ? results.map(([kind, text], i) => `<div data-result="${i}"><span class="kind">${kind}</span>${esc(text)}</div>`).join("")
      : `<div>nothing matches</div>`;
  });
  $("search").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && results.length) { results[0][2](); $("results").hidden = true; }
    if (e.key === "Escape") $("results").hidden = true;
  });
  $("results").onclick = (e) => {
    const r = e.target.closest("[data-result]");
    if (r) { results[+r.dataset.result][2](); $("results").hidden = true; }
  };
  wireGraph();
}

function step(d) {
  if (state.kernel < 0) return;
  const k = state.trace.kernels[state.kernel];
  const s = state.stage + d;
  if (s < 0 || s >= k.stages.length) return;
  state.stage = s;
  showStage();
}

// ---- the profile as a timeline ------------------------------------------------------------

function drawTimeline() {
  const events = state.trace.profile;
  const names = new Map(), tracks = new Map();
  for (const e of events) if (e.ph === "M") names.set(`${e.name}:${e.pid}:${e.tid}`, e.args.name);
  const spans = events.filter((e) => e.ph === "X");
  if (!spans.length) { $("timeline").innerHTML = `<p class="hint">This trace holds no profile.</p>`; return; }
  const end = Math.max(...spans.map((e) => e.ts + e.dur)), begin = Math.min(...spans.map((e) => e.ts));
  for (const e of spans) {
    const key = `${e.pid}:${e.tid}`;
    if (!tracks.has(key)) tracks.set(key, []);
    tracks.get(key).push(e);
  }
  const width = Math.max(600, $("timeline").clientWidth - 240);
  const scale = width / Math.max(end - begin, 1);
  const html = [`<div class="hint">${fmt((end - begin) / 1e3)} ms; hover a bar for its figures</div>`];
  for (const [key, list] of tracks) {
    const [pid, tid] = key.split(":");
    const label = `${names.get(`process_name:${pid}:0`) || pid} / ${names.get(`thread_name:${pid}:${tid}`) || tid}`;
    const bars = list.slice(0, 5000).map((e) => {
      const tip = `${e.name} ${fmt(e.dur / 1e3)} ms ${e.args ? JSON.stringify(e.args) : ""}`;
      return `<div class="bar ${esc(e.cat)}" style="left:${210 + (e.ts - begin) * scale}px;width:${e.dur * scale}px" title="${esc(tip)}"></div>`;
    });
    html.push(`<div class="track"><span class="track-name" title="${esc(label)}">${esc(label)}</span>${bars.join("")}</div>`);
  }
  $("timeline").innerHTML = html.join("");
}

main().catch((e) => {
  $("summary").textContent = `error: ${e.message}`;
  throw e;
});
