"use strict";
// The attention explorer. POST /attention answers with the pieces and
// attention[kind][layer][head][query][key]; pointing at a query piece lights up the key
// pieces with that row of the chosen (L, S) matrix: one head, or the mean of the heads.

const $ = (id) => document.getElementById(id);
const HIGHLIGHT = "255, 214, 0"; // highlighter yellow; the alpha is the weight itself

// Which row of pieces one points at (queries) and which lights up (keys), per kind.
const KINDS = {
  cross: {
    queries: "tgt", keys: "src", layers: "decoder",
    hint: "Point at (or click) a target piece: the source pieces light up with its cross-attention weights.",
  },
  encoder_self: {
    queries: "src", keys: "src", layers: "encoder",
    hint: "Point at (or click) a source piece: the source pieces light up with its self-attention weights.",
  },
  decoder_self: {
    queries: "tgt", keys: "tgt-in", layers: "decoder",
    hint: "Point at (or click) a target piece: the decoder inputs it attended to light up. " +
      "Causal: piece i was produced from <s> and the pieces before it, so only those can light up.",
  },
};

let data = null; // the last /attention answer
let pinned = 0; // the clicked query piece
let hovered = null; // the query piece under the pointer, if any

function piecesOf(row) {
  return { src: data.src_pieces, tgt: data.tgt_pieces, "tgt-in": data.tgt_in_pieces }[row];
}

function kind() {
  return KINDS[$("kind").value];
}

// The chosen (L, S) matrix: [query][key].
function matrix() {
  const heads = data.attention[$("kind").value][Number($("layer").value)];
  const head = $("head").value;
  if (head !== "avg") return heads[Number(head)];
  return heads[0].map((row, i) =>
    row.map((_, j) => heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
}

function shade(element, weight, label) {
  element.style.backgroundColor = `rgba(${HIGHLIGHT}, ${weight})`;
  element.dataset.weight = weight.toFixed(4);
  element.title = `${label}: ${weight.toFixed(4)}`;
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

// ------------------------------------------------------------ structure (new answer or kind)
// Options of a select; the current choice stays when it still exists, else `fallback`.
function fillSelect(select, values, labels, fallback) {
  const keep = select.value;
  select.replaceChildren(...values.map((v, i) => new Option(labels[i], v)));
  select.value = values.includes(keep) ? keep : fallback;
}

function buildControls() {
  const layers = data.attention[kind().layers === "encoder" ? "encoder_self" : "cross"].length;
  const values = [...Array(layers).keys()].map(String);
  fillSelect($("layer"), values, values, values[values.length - 1]);
  const nHeads = data.attention.cross[0].length;
  const heads = ["avg", ...[...Array(nHeads).keys()].map(String)];
  fillSelect($("head"), heads, ["average", ...heads.slice(1)], "avg");
}

function buildPieces() {
  const k = kind();
  for (const row of ["src", "tgt", "tgt-in"]) {
    const box = $(row);
    box.replaceChildren();
    piecesOf(row).forEach((text, i) => {
      const span = document.createElement("span");
      span.className = "piece";
      span.textContent = text;
      span.dataset.index = i;
      if (row === k.queries) {
        span.classList.add("query");
        span.tabIndex = 0;
        span.addEventListener("mouseenter", () => { hovered = i; update(); });
        span.addEventListener("mouseleave", () => { hovered = null; update(); });
        span.addEventListener("click", () => { pinned = i; update(); });
        span.addEventListener("focus", () => { pinned = i; update(); });
      }
      box.append(span);
    });
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

// ------------------------------------------------------------ shading (every change)
function update() {
  const k = kind();
  const m = matrix();
  const query = Math.min(hovered ?? pinned, m.length - 1);
  const queries = piecesOf(k.queries);
  const keys = piecesOf(k.keys);
  for (const row of ["src", "tgt", "tgt-in"]) {
    for (const span of $(row).children) {
      span.style.backgroundColor = "";
      delete span.dataset.weight;
      span.title = "";
      span.classList.toggle("selected", row === k.queries && Number(span.dataset.index) === query);
    }
  }
  [...$(k.keys).children].forEach((span, j) =>
    shade(span, m[query][j], `${queries[query]} → ${keys[j]}`));
  drawHeatmap(m, queries, keys, query);
}

function drawHeatmap(m, queries, keys, current) {
  const head = $("head").value === "avg" ? "average of heads" : `head ${$("head").value}`;
  $("heat-title").textContent =
    `${$("kind").value}, layer ${$("layer").value}, ${head}: ${m.length} × ${keys.length}`;
  const table = document.createElement("table");
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
      shade(td, w, `${queries[i]} → ${keys[j]}`);
      td.addEventListener("mouseenter", () => { $("cell-info").textContent = td.title; });
    });
  });
  $("heatmap").replaceChildren(table);
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

async function translate(event) {
  event.preventDefault();
  const body = {
    text: $("text").value,
    beam: $("method").value === "beam" ? Number($("beam").value) : 1,
  };
  if ($("model").value) body.model = $("model").value;
  status("Translating…");
  $("translate").disabled = true;
  try {
    data = await postJSON("attention", body);
    $("translation").textContent = data.hyp;
    $("result").hidden = false;
    build();
    status(`model ${data.model}, score ${data.score.toFixed(3)}`);
  } catch (error) {
    status(error.message, true);
  } finally {
    $("translate").disabled = false;
  }
}

async function loadModels() {
  try {
    const models = await (await fetch("models")).json();
    for (const m of models) {
      $("model").add(new Option(`${m.name} (${m.src_lang} → ${m.tgt_lang})`, m.name));
    }
  } catch (error) {
    status(`cannot list the models: ${error.message}`, true);
  }
}

$("form").addEventListener("submit", translate);
$("method").addEventListener("change", () => { $("beam").disabled = $("method").value !== "beam"; });
$("kind").addEventListener("change", () => { if (data) build(); });
$("layer").addEventListener("change", () => { if (data) update(); });
$("head").addEventListener("change", () => { if (data) update(); });
loadModels();
