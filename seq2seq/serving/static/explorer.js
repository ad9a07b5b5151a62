"use strict";
// The attention explorer. POST /attention answers with the pieces and
// attention[kind][layer][head][query][key]; pointing at a query lights up the keys with that
// row of the chosen (L, S) matrix: one head, or the mean of the heads. In the words view,
// pieces are merged into words: a word's weight as a key is the sum over its pieces (rows
// stay distributions), as a query the mean over its pieces.

const $ = (id) => document.getElementById(id);
// viridis (perceptually uniform; lightness rises with the value), 9 stops from 0 to 1
const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
  "#addc30", "#fde725"].map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
const WORD_START = "\u2581"; // SentencePiece's "▁": a piece that begins a word

const KINDS = { // which row one points at (queries), which lights up (keys)
  cross: {
    queries: "tgt", keys: "src", layers: "cross",
    hint: "Point at (or click) a target piece: the source lights up with its cross-attention weights.",
  },
  encoder_self: {
    queries: "src", keys: "src", layers: "encoder_self",
    hint: "Point at (or click) a source piece: the source lights up with its self-attention weights.",
  },
  decoder_self: {
    queries: "tgt", keys: "tgt-in", layers: "cross",
    hint: "Point at (or click) a target piece: the decoder inputs it attended to light up. " +
      "Causal: piece i was produced from <s> and the pieces before it, so only those can light up.",
  },
};

let data = null; // the last /attention answer
let pinned = 0; // the clicked query unit
let hovered = null; // the query unit under the pointer, if any

// ------------------------------------------------------------ colours
function colour(value) { // value in [0, 1] -> "rgb(r, g, b)" on viridis
  const x = Math.min(Math.max(value, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2);
  const t = x - i;
  const rgb = VIRIDIS[i].map((c, k) => Math.round(c + (VIRIDIS[i + 1][k] - c) * t));
  return `rgb(${rgb.join(", ")})`;
}

function shade(element, weight, vmax, label) {
  const v = vmax > 0 ? weight / vmax : 0;
  element.style.backgroundColor = colour(v);
  element.style.color = v > 0.55 ? "#111" : "#fff"; // readable on dark and light ends
  element.dataset.weight = weight.toFixed(4);
  element.title = `${label}: ${weight.toFixed(4)}`;
}

function drawLegend(vmax) {
  const stops = VIRIDIS.map((_, i) => colour(i / (VIRIDIS.length - 1))).join(", ");
  $("legend-bar").style.background = `linear-gradient(to right, ${stops})`;
  $("legend-max").textContent = vmax.toFixed(2);
}

// ------------------------------------------------------------ units: pieces or words
function words(pieces) { // [{text, members}]: a new word at "▁" and at every special piece
  const out = [];
  pieces.forEach((p, i) => {
    const special = /^<.*>$/.test(p);
    const prev = out[out.length - 1];
    if (!prev || special || prev.special || p.startsWith(WORD_START)) {
      out.push({ text: p.replace(WORD_START, ""), members: [i], pieces: [p], special });
    } else {
      prev.text += p;
      prev.members.push(i);
      prev.pieces.push(p);
    }
  });
  return out;
}

function units(row) {
  const pieces = { src: data.src_pieces, tgt: data.tgt_pieces, "tgt-in": data.tgt_in_pieces }[row];
  if ($("units").value === "words") return words(pieces);
  // "▁" is shown as a gap before the piece (class word-start), not as a character
  return pieces.map((p, i) => ({ text: p === WORD_START ? p : p.replace(WORD_START, ""),
    members: [i], pieces: [p] }));
}

function kind() {
  return KINDS[$("kind").value];
}

// The (L, S) matrix of a head ("avg": the mean of the heads), in the current units.
function matrix(head) {
  const heads = data.attention[$("kind").value][Number($("layer").value)];
  const m = head !== "avg" ? heads[Number(head)] : heads[0].map((row, i) =>
    row.map((_, j) => heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
  const q = units(kind().queries);
  const k = units(kind().keys);
  return q.map((qu) => k.map((ku) => qu.members.reduce((s, i) =>
    s + ku.members.reduce((t, j) => t + m[i][j], 0), 0) / qu.members.length));
}

const maxOf = (m) => Math.max(...m.map((row) => Math.max(...row)));

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

// ------------------------------------------------------------ structure (new answer or view)
// Options of a select; the current choice stays when it still exists, else `fallback`.
function fillSelect(select, values, labels, fallback) {
  const keep = select.value;
  select.replaceChildren(...values.map((v, i) => new Option(labels[i], v)));
  select.value = values.includes(keep) ? keep : fallback;
}

function buildControls() {
  const layers = data.attention[kind().layers].length;
  const values = [...Array(layers).keys()].map(String);
  fillSelect($("layer"), values, values, values[values.length - 1]);
  const nHeads = data.attention.cross[0].length;
  const heads = ["avg", ...[...Array(nHeads).keys()].map(String)];
  fillSelect($("head"), heads, ["average", ...heads.slice(1)], "avg");
}

function unitSpan(unit, i) {
  const span = document.createElement("span");
  span.className = "piece";
  span.textContent = unit.text;
  span.dataset.index = i;
  span.dataset.pieces = unit.pieces.join(" "); // SentencePiece pieces never hold a space
  if (unit.pieces.length === 1 && unit.pieces[0].startsWith(WORD_START) &&
      $("units").value === "pieces") span.classList.add("word-start");
  return span;
}

function buildPieces() {
  const k = kind();
  for (const row of ["src", "tgt", "tgt-in"]) {
    $(row).replaceChildren(...units(row).map((unit, i) => {
      const span = unitSpan(unit, i);
      if (row === k.queries) {
        span.classList.add("query");
        span.tabIndex = 0;
        span.addEventListener("mouseenter", () => { hovered = i; update(); });
        span.addEventListener("mouseleave", () => { hovered = null; update(); });
        span.addEventListener("click", () => { pinned = i; update(); });
        span.addEventListener("focus", () => { pinned = i; update(); });
      }
      return span;
    }));
  }
  $("tgt-in-row").hidden = k.keys !== "tgt-in";
  $("hint").textContent = k.hint;
}

function build() {
  pinned = 0;
  hovered = null;
  buildControls();
  buildPieces();
  update();
}

function showTranslation() {
  const confidence = (score) => `${(100 * Math.exp(score)).toFixed(1)}%`;
  $("translation").textContent = data.hyp;
  $("confidence").textContent = `model ${data.model} · score ${data.score.toFixed(3)} · ` +
    `confidence ${confidence(data.score)} (see the n-best list)`;
  // "unsure": the output's confidence is below the model's calibrated threshold
  const unsure = (data.flags || []).includes("unsure");
  const threshold = (models.find((m) => m.name === data.model) || {}).unsure_below;
  $("unsure").hidden = !unsure;
  $("unsure").textContent = unsure ? `⚠ Unsure: confidence ${(100 * data.confidence).toFixed(1)}% ` +
    `is below this model's threshold${threshold ? ` (${(100 * threshold).toFixed(1)}%)` : ""}. ` +
    "The sentence is probably unlike what the model was trained on; the translation may be wrong." : "";
  $("nbest").replaceChildren(...data.nbest.map((n) => {
    const li = document.createElement("li");
    li.textContent = `${n.hyp} — score ${n.score.toFixed(3)}, confidence ${confidence(n.score)}`;
    li.dataset.score = n.score;
    return li;
  }));
}

// ------------------------------------------------------------ shading (every change)
function update() {
  const k = kind();
  const m = matrix($("head").value);
  const vmax = maxOf(m);
  const query = Math.min(hovered ?? pinned, m.length - 1);
  const queries = units(k.queries).map((u) => u.text);
  const keys = units(k.keys).map((u) => u.text);
  for (const row of ["src", "tgt", "tgt-in"]) {
    for (const span of $(row).children) {
      span.style.backgroundColor = "";
      span.style.color = "";
      delete span.dataset.weight;
      span.title = "";
      span.classList.toggle("selected", row === k.queries && Number(span.dataset.index) === query);
    }
  }
  [...$(k.keys).children].forEach((span, j) =>
    shade(span, m[query][j], vmax, `${queries[query]} → ${keys[j]}`));
  drawLegend(vmax);
  drawHeatmap(m, vmax, queries, keys, query);
  drawHeads(query);
}

function cellSize(columns) { // heat-map cells fit the page's width: no sideways scrolling
  const room = $("heatmap").clientWidth - 80; // the row labels take about 80 px
  return Math.max(6, Math.min(24, Math.floor(room / Math.max(columns, 1))));
}

function drawHeatmap(m, vmax, queries, keys, current) {
  const head = $("head").value === "avg" ? "average of heads" : `head ${$("head").value}`;
  $("heat-title").textContent =
    `${$("kind").value}, layer ${$("layer").value}, ${head}: ${m.length} × ${keys.length}`;
  const table = document.createElement("table");
  table.style.setProperty("--cell", `${cellSize(keys.length)}px`);
  const top = table.createTHead().insertRow();
  top.append(document.createElement("th"));
  for (const key of keys) {
    const th = document.createElement("th");
    th.textContent = key;
    top.append(th);
  }
  const body = table.createTBody();
  m.forEach((row, i) => {
    const tr = body.insertRow();
    tr.classList.toggle("current", i === current);
    const th = document.createElement("th");
    th.textContent = queries[i];
    tr.append(th);
    row.forEach((w, j) => {
      const td = tr.insertCell();
      shade(td, w, vmax, `${queries[i]} → ${keys[j]}`);
      td.addEventListener("mouseenter", () => { $("cell-info").textContent = td.title; });
    });
  });
  $("heatmap").replaceChildren(table);
}

// Every head of the layer as a small heat map, all on one colour scale, to compare at a glance.
function drawHeads(current) {
  const n = data.attention.cross[0].length;
  const all = [...Array(n).keys()].map((h) => matrix(String(h)));
  const vmax = Math.max(...all.map(maxOf));
  $("heads").replaceChildren(...all.map((m, h) => {
    const figure = document.createElement("figure");
    figure.className = "head";
    figure.classList.toggle("chosen", $("head").value === String(h));
    figure.dataset.head = h;
    const grid = document.createElement("div");
    grid.className = "mini";
    grid.style.gridTemplateColumns = `repeat(${m[0].length}, 1fr)`;
    m.forEach((row, i) => row.forEach((w) => {
      const cell = document.createElement("div");
      cell.style.backgroundColor = colour(vmax > 0 ? w / vmax : 0);
      cell.dataset.weight = w.toFixed(4);
      if (i === current) cell.className = "current";
      grid.append(cell);
    }));
    const caption = document.createElement("figcaption");
    caption.textContent = `head ${h}`;
    figure.append(grid, caption);
    figure.addEventListener("click", () => { $("head").value = String(h); update(); });
    return figure;
  }));
}

// ------------------------------------------------------------ requests
async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) {
    const detail = answer.detail;
    throw new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return answer;
}

function requestBody() {
  const beam = $("method").value === "beam" ? Number($("beam").value) : 1;
  // score = mean log-prob per piece (the "average" length penalty): confidence = e^score
  const body = { text: $("text").value, beam, nbest: Math.min(beam, 5), length_penalty: "average" };
  if ($("model").value) body.model = $("model").value;
  if (!$("direction-box").hidden) {  // a multilingual model: "en-de" -> source and target
    [body.source_lang, body.target_lang] = $("direction").value.split("-");
  }
  return body;
}

async function translate(event) {
  event.preventDefault();
  if (!$("text").value.trim()) {
    status("Type a sentence to translate first.", true);
    $("text").focus();
    return;
  }
  status("Translating…");
  $("translate").disabled = true;
  try {
    data = await postJSON("attention", requestBody());
    showTranslation();
    $("result").hidden = false;
    build();
    status("");
  } catch (error) {
    status(error.message, true);
  } finally {
    $("translate").disabled = false;
  }
}

let models = [];

// The direction picker: shown only for a multilingual model, listing its directions.
function showDirections() {
  const m = models.find((x) => x.name === $("model").value);
  const multilingual = Boolean(m && m.multilingual);
  $("direction-box").hidden = !multilingual;
  $("direction").replaceChildren(...(multilingual ? m.directions : []).map(
    (d) => new Option(d.replace("-", " → "), d)));
}

async function loadModels() {
  try {
    models = await (await fetch("models")).json();
    for (const m of models) {
      const label = m.multilingual ? `${m.directions.length} directions` : `${m.src_lang} → ${m.tgt_lang}`;
      $("model").add(new Option(`${m.name} (${label})`, m.name));
    }
    showDirections();
  } catch (error) {
    status(`cannot list the models: ${error.message}`, true);
  }
}

$("form").addEventListener("submit", translate);
$("model").addEventListener("change", showDirections);
$("method").addEventListener("change", () => { $("beam").disabled = $("method").value !== "beam"; });
$("kind").addEventListener("change", () => { if (data) build(); });
$("units").addEventListener("change", () => { if (data) { pinned = 0; buildPieces(); update(); } });
$("layer").addEventListener("change", () => { if (data) update(); });
$("head").addEventListener("change", () => { if (data) update(); });
window.addEventListener("resize", () => { if (data) update(); });
loadModels();
