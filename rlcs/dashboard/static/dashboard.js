// The curriculum dashboard: polls the JSON API and redraws with the locally served plotly.js.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token");
// ?refresh=N seconds; 0 or a typo would otherwise poll the server without pause
const refreshSeconds = Math.max(1, Number(params.get("refresh")) || 5);
const TIER_COLORS = ["#b2182b", "#ef8a62", "#67a9cf", "#2166ac", "#1a9850", "#999999",
  "#762a83", "#e08214"];
const layoutBase = { margin: { l: 48, r: 12, t: 26, b: 40 },
  legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: { size: 11 } },
  xaxis: { title: { text: "iteration", standoff: 4 } } };
const config = { displayModeBar: false, responsive: true };
let lastIteration = null;
let lastSnapshot;  // not null: a run with no saved state yet says so in its table's note
let lastMetrics = null;
let lastExists = null;
let lastStoreError = null;
let series = null;
// A marker on every point (a bar for every iteration) only while the points are few: a long
// run's tens of thousands of SVG markers take seconds to draw, and a live page redraws on every
// new step.
const MARKERS_UP_TO = 500;

function lineMode(x) { return x.length <= MARKERS_UP_TO ? "lines+markers" : "lines"; }

async function api(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const response = await fetch(path, { headers });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

// Iterations and steps are whole numbers: a run's first few get a tick each, none between them.
function layoutFor(x, extra) {
  const span = x.length ? x[x.length - 1] - x[0] : 0;
  const xaxis = span < 8 ? Object.assign({ dtick: 1 }, layoutBase.xaxis) : layoutBase.xaxis;
  return Object.assign({}, layoutBase, { xaxis }, extra);
}

function color(tiers, tier) { return TIER_COLORS[tiers.indexOf(tier) % TIER_COLORS.length]; }

function lines(x, named, tiers, extra) {
  return Object.entries(named).map(([name, y]) => Object.assign(
    { x, y, name, type: "scatter", mode: "lines", line: { color: color(tiers, name) } }, extra || {}));
}

function drawPassRate() {
  const domain = document.getElementById("passrate-domain").value || "all";
  const byTier = series.pass_rate[domain] || {};
  const traces = lines(series.iterations, byTier, series.tiers, { connectgaps: false });
  Plotly.react("plot-passrate", traces, layoutFor(series.iterations,
    { yaxis: { range: [0, 1], title: { text: "pass rate" } } }), config);
}

// The curriculum's own figures, hidden with a notice until its first iteration is stored.
const CURRICULUM_PLOTS = ["plot-tiers", "plot-passrate", "plot-expansion", "plot-valid",
  "plot-hist", "plot-sampled"];

function draw(summary) {
  const x = series.iterations;
  const t = series.tiers;
  const notice = document.getElementById("no-iterations");
  notice.hidden = x.length > 0;
  for (const id of CURRICULUM_PLOTS) {
    document.getElementById(id).parentElement.hidden = !notice.hidden;
  }
  // an unreadable aggregates.sqlite: which file, why, and what is still shown (the summary
  // reads only the store's metadata and last iteration; the series, every row, may find more)
  const storeError = summary.store_error || series.store_error;
  notice.textContent = storeError ? storeError : !summary.exists
    ? `${summary.run_dir} does not exist: not yet (a demo makes its RL stage's directory when RL ` +
      "begins), or no longer. The page fills in once a run writes there."
    : `No curriculum iteration in ${summary.run_dir}/curriculum/ yet: the charts fill in as the ` +
      "run's sampler stores its iterations (only an RL run with curriculum sampling does).";
  drawSubcategories();
  drawHeldout();
  drawTraining();
  if (x.length === 0) return;
  Plotly.react("plot-tiers", lines(x, series.population, t, { stackgroup: "pop" }),
    layoutFor(x, { yaxis: { title: { text: "items" } } }), config);
  drawPassRate();
  Plotly.react("plot-expansion", [
    { x, y: series.expansion_ratio, name: "expansion ratio", type: "scatter", mode: "lines",
      line: { color: "#999", dash: "dot" } },
    { x, y: series.expansion_ema, name: "EMA (over-sampling factor)", type: "scatter",
      mode: "lines", line: { color: "#d6604d", width: 3 } },
  ], layoutFor(x, { yaxis: { title: { text: "ratio" } } }), config);
  Plotly.react("plot-valid", [
    { x, y: series.valid_fraction, name: "valid groups (neither all right nor all wrong)",
      type: "scatter", mode: "lines", fill: "tozeroy", line: { color: "#4393c3" } },
    { x, y: series.pass_at_k, name: "pass@k (any rollout right)", type: "scatter",
      mode: "lines", line: { color: "#1b7837", dash: "dot" } },
  ], layoutFor(x, { yaxis: { range: [0, 1.05], title: { text: "fraction of groups" } } }),
  config);
  const bins = series.histogram.length;
  Plotly.react("plot-hist", [{ x: series.histogram.map((_, i) => (i + 0.5) / bins),
    y: series.histogram, type: "bar", marker: { color: "#5aae61" }, name: "items" }],
  Object.assign({}, layoutBase, { xaxis: { title: { text: "pass rate" }, range: [0, 1] },
    yaxis: { title: { text: "items" } }, bargap: 0.05, showlegend: false }), config);
  // a bar an iteration while they are few; a long run's tens of thousands of bars, each under a
  // pixel wide, take seconds to draw: there the same counts are stacked areas
  const style = x.length <= MARKERS_UP_TO ? { type: "bar" } : { stackgroup: "sampled" };
  Plotly.react("plot-sampled", lines(x, series.sampled, t, style).map(
    (tr) => Object.assign(tr, { marker: { color: tr.line.color } })),
  layoutFor(x, { barmode: "stack", yaxis: { title: { text: "prompts" } } }), config);
}

// From the run's metrics.jsonl (RL runs only): the sampled reward of each domain and their
// mean; and what became of each iteration's groups (rolled out over all generation rounds,
// trained on, rejected by learner.grpo.group_filter) beside its rollouts that could not be
// scored, were left out of training (reward.unscorable: drop) or broke the answer format.
function drawTraining() {
  const train = series.training || { steps: [] };
  const empty = train.steps.length === 0;
  document.getElementById("fig-reward").hidden = empty;
  document.getElementById("fig-accounting").hidden = empty;
  if (empty) return;
  const x = train.steps;
  const domains = Object.keys(train.reward).filter((d) => d !== "mean");
  const rewards = domains.map((d, i) => ({ x, y: train.reward[d], name: d, type: "scatter",
    mode: lineMode(x), marker: { size: 4 }, line: { color: TIER_COLORS[i % TIER_COLORS.length] } }));
  if (train.reward.mean) rewards.push({ x, y: train.reward.mean, name: "mean", type: "scatter",
    mode: "lines", line: { color: "#222", width: 3 } });
  Plotly.react("plot-reward", rewards, layoutFor(x,
    { yaxis: { range: [0, 1.05], title: { text: "reward" } } }), config);
  const groupColors = { "rolled out": "#4393c3", trained: "#1b7837", "filtered out": "#e08214" };
  const rolloutStyle = { "could not be scored": ["#b2182b", "dash"],
    "left out of training": ["#b2182b", "dot"], "format error": ["#999999", "dash"] };
  const traces = Object.entries(train.groups).map(([name, y]) => ({ x, y, name, type: "scatter",
    mode: lineMode(x), marker: { size: 4 }, line: { color: groupColors[name] || "#555" } }));
  let most = 0;
  for (const [name, y] of Object.entries(train.rollouts)) {
    most = Math.max(most, ...y.filter((v) => v !== null));
    const [colour, dash] = rolloutStyle[name] || ["#555", "dash"];
    traces.push({ x, y, name: `${name} (rollouts)`, yaxis: "y2", type: "scatter", mode: "lines",
      line: { color: colour, dash } });
  }
  Plotly.react("plot-accounting", traces, layoutFor(x, {
    yaxis: { title: { text: "groups" }, rangemode: "tozero" },
    // counts: whole-number ticks, about four of them however few the rollouts
    yaxis2: { title: { text: "rollouts" }, overlaying: "y", side: "right", rangemode: "tozero",
      showgrid: false, tickmode: "linear", tick0: 0, dtick: Math.max(1, Math.ceil(most / 4)) },
    margin: Object.assign({}, layoutBase.margin, { r: 48 }) }), config);
}

// Only for runs that evaluate on held-out items (run.eval_every): the greedy pass rate of each
// domain and of all, and with run.eval_samples the sampled pass rate and pass@k of all.
function drawHeldout() {
  const held = series.heldout || { steps: [] };
  const figure = document.getElementById("fig-heldout");
  figure.hidden = held.steps.length === 0;
  if (figure.hidden) return;
  const x = held.steps;
  const domains = Object.keys(held.pass_rate).filter((d) => d !== "all");
  const traces = domains.map((d, i) => ({ x, y: held.pass_rate[d], name: d, type: "scatter",
    mode: lineMode(x), marker: { size: 5 }, line: { color: TIER_COLORS[i % TIER_COLORS.length] } }));
  const all = [["pass_rate", "all (greedy)", "solid"], ["sampled_pass_rate", "all, sampled", "dash"],
    ["pass_at_k", "all, pass@k", "dot"]];
  for (const [kind, name, dash] of all) {
    const y = (held[kind] || {}).all;
    if (y) traces.push({ x, y, name, type: "scatter", mode: lineMode(x), marker: { size: 5 },
      line: { color: "#222", width: 3, dash } });
  }
  Plotly.react("plot-heldout", traces, layoutFor(x,
    { yaxis: { range: [0, 1.05], title: { text: "pass rate" } } }), config);
}

// Only for runs whose items name subcategories: each one's pass rate in the iterations that
// drew it, joined across the iterations that did not; with curriculum.subcategory_prior, also
// (dashed) the rate over recent iterations that the sampler gives its items without evidence.
function drawSubcategories() {
  const names = Object.keys(series.subcategories || {});
  const figure = document.getElementById("fig-subcategories");
  figure.hidden = names.length === 0;
  if (figure.hidden) return;
  const rates = series.subcategory_rates || {};
  const traces = names.map((name, i) => ({ x: series.iterations, y: series.subcategories[name],
    name, legendgroup: name, type: "scatter", mode: lineMode(series.iterations), connectgaps: true,
    marker: { size: 4 }, line: { color: TIER_COLORS[i % TIER_COLORS.length] } }));
  names.forEach((name, i) => {
    if (!rates[name]) return;
    traces.push({ x: series.iterations, y: rates[name], name: `${name} (sampler's rate)`,
      legendgroup: name, type: "scatter", mode: "lines",
      line: { color: TIER_COLORS[i % TIER_COLORS.length], dash: "dash" } });
  });
  Plotly.react("plot-subcategories", traces, layoutFor(series.iterations,
    { yaxis: { range: [0, 1.05], title: { text: "pass rate" } } }), config);
}

// The options are built as elements, never as markup: a domain or tier name is the run's data
// and may hold quotes, angle brackets or ampersands, which must be shown and matched as they are.
function fillSelect(id, values, keepFirst) {
  const select = document.getElementById(id);
  const current = select.value;
  const options = values.map((v) => {
    const option = document.createElement("option");
    option.value = v;
    option.textContent = v;
    return option;
  });
  if (keepFirst) options.unshift(select.options[0]);
  select.replaceChildren(...options);
  const keep = values.includes(current) || (keepFirst && current === "");
  select.value = keep ? current : select.options[0].value;
}

// The item table shows a page of the matching items at a time; the server caps a page at 1,000
// rows, and a run can hold millions.
const PAGE_ROWS = 25;
let itemsOffset = 0;
let itemsRequest = 0;
// a column header's click sorts by it, a second click the other way, a third gives back the
// items' own order; the server sorts every match, so the pages follow the order
let itemsSort = "";
let itemsDesc = false;

async function loadItems() {
  const mine = ++itemsRequest;  // filters change faster than answers come: draw only the latest
  const q = new URLSearchParams({
    q: document.getElementById("item-search").value,
    domain: document.getElementById("item-domain").value,
    tier: document.getElementById("item-tier").value,
    offset: String(itemsOffset),
    limit: String(PAGE_ROWS),
    sort: itemsSort,
    desc: String(itemsDesc),
  });
  const data = await api("api/items?" + q);
  if (mine !== itemsRequest) return;
  if (data.rows.length === 0 && itemsOffset > 0 && data.total > 0) {
    // fewer items match than before (items change tier as the run goes on): the last page
    itemsOffset = Math.floor((data.total - 1) / PAGE_ROWS) * PAGE_ROWS;
    await loadItems();
    return;
  }
  const body = document.querySelector("#item-table tbody");
  // cells as text, never markup: ids, domain, subcategory and tier names are the run's data
  body.replaceChildren(...data.rows.map((r) => tableRow([
    [r.id],
    [r.subcategory ? `${r.domain} / ${r.subcategory}` : r.domain],
    [r.tier],
    [String(r.attempts), "num"],
    [r.pass_rate === null ? "–" : r.pass_rate.toFixed(3), "num"],
    [r.last_seen < 0 ? "never" : String(r.last_seen), "num"],
  ])));
  const first = itemsOffset + 1;
  const last = itemsOffset + data.rows.length;
  document.getElementById("item-count").textContent =
    `${data.total.toLocaleString()} match` + (data.total > data.rows.length
      ? `, ${first.toLocaleString()}–${last.toLocaleString()} shown` : "");
  const pages = Math.max(1, Math.ceil(data.total / PAGE_ROWS));
  document.getElementById("items-pager").hidden = pages <= 1;
  document.getElementById("items-prev").disabled = itemsOffset === 0;
  document.getElementById("items-next").disabled = last >= data.total;
  const pageInput = document.getElementById("items-page");
  pageInput.max = String(pages);
  pageInput.value = String(Math.floor(itemsOffset / PAGE_ROWS) + 1);
  document.getElementById("items-pages").textContent = pages.toLocaleString();
  const damaged = document.getElementById("items-error");
  damaged.hidden = !data.snapshot_error;
  damaged.textContent = data.snapshot_error || "";
  document.getElementById("items-note").textContent = data.snapshot_error
    ? "(the saved state cannot be read)" : data.snapshot_iteration === null
      ? "(no saved state yet)" : `(as saved at iteration ${data.snapshot_iteration})`;
  document.body.dataset.itemsLoaded = String(Date.now());
}

// a new search or filter starts at its first page
function filterItems() {
  itemsOffset = 0;
  loadItems();
}

function sortItems(key) {
  if (itemsSort !== key) {
    [itemsSort, itemsDesc] = [key, false];
  } else if (!itemsDesc) {
    itemsDesc = true;
  } else {
    [itemsSort, itemsDesc] = ["", false];
  }
  for (const th of document.querySelectorAll("#item-table th[data-sort]")) {
    const on = th.dataset.sort === itemsSort;
    th.setAttribute("aria-sort", on ? (itemsDesc ? "descending" : "ascending") : "none");
  }
  filterItems();
}

function showPage(page) {
  const pages = Number(document.getElementById("items-page").max) || 1;
  const wanted = Math.min(Math.max(1, Math.floor(page) || 1), pages);
  itemsOffset = (wanted - 1) * PAGE_ROWS;
  loadItems();
}

// A table row of [text, class] cells, the text set as text.
function tableRow(cells) {
  const tr = document.createElement("tr");
  for (const [text, className] of cells) {
    const td = tr.insertCell();
    td.textContent = text;
    if (className) td.className = className;
  }
  return tr;
}

async function refresh() {
  const summary = await api("api/summary");
  document.getElementById("run-name").textContent = summary.run;
  document.getElementById("policy").textContent = summary.policy || "–";
  document.getElementById("num-items").textContent = (summary.num_items || 0).toLocaleString();
  document.getElementById("iteration").textContent = summary.iteration;
  // a store whose summary reads but whose other rows the series could not read is read again
  // on every poll, until it can
  if (summary.iteration !== lastIteration || summary.metrics_step !== lastMetrics ||
      summary.exists !== lastExists || summary.store_error !== lastStoreError ||
      (series && series.store_error && !summary.store_error)) {
    lastIteration = summary.iteration;
    lastMetrics = summary.metrics_step;
    lastExists = summary.exists;
    lastStoreError = summary.store_error;
    series = await api("api/series");
    fillSelect("passrate-domain", ["all", ...series.domains], false);
    fillSelect("item-domain", summary.domains, true);
    fillSelect("item-tier", summary.tiers, true);
    draw(summary);
  }
  const live = document.getElementById("live");
  const fresh = summary.updated && Date.now() / 1000 - summary.updated < 60;
  live.textContent = summary.store_error || series.store_error ? "aggregates unreadable"
    : fresh ? "● live" : summary.updated ? "finished or idle" : "waiting for the run";
  live.className = fresh ? "on" : "";
  if (summary.snapshot_iteration !== lastSnapshot) {
    lastSnapshot = summary.snapshot_iteration;
    await loadItems();
  }
  document.body.dataset.iteration = String(summary.iteration);
}

let searchTimer = null;
document.getElementById("item-search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(filterItems, 200);
});
document.getElementById("item-domain").addEventListener("change", filterItems);
for (const th of document.querySelectorAll("#item-table th[data-sort]")) {
  th.querySelector("button").addEventListener("click", () => sortItems(th.dataset.sort));
}
document.getElementById("item-tier").addEventListener("change", filterItems);
document.getElementById("items-prev").addEventListener("click",
  () => showPage(itemsOffset / PAGE_ROWS));
document.getElementById("items-next").addEventListener("click",
  () => showPage(itemsOffset / PAGE_ROWS + 2));
document.getElementById("items-page").addEventListener("change",
  (e) => showPage(Number(e.target.value)));
document.getElementById("passrate-domain").addEventListener("change", drawPassRate);

async function tick() {
  try { await refresh(); } catch (e) { document.getElementById("live").textContent = String(e); }
  setTimeout(tick, refreshSeconds * 1000);
}
tick();
