// ubatch's web page: a chat playground over POST /v1/chat/completions (streamed) and a live view
// of the engine's batching from GET /live. Both are server-sent event streams read with fetch,
// so that the API key can go in the Authorization header.
"use strict";

const $ = (id) => document.getElementById(id);
const keyInput = $("key");
keyInput.value = localStorage.getItem("ubatch.key") || "";
keyInput.addEventListener("change", () => {
  localStorage.setItem("ubatch.key", keyInput.value);
  loadModel();
  restartLive();
});

function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyInput.value) h.Authorization = "Bearer " + keyInput.value;
  return h;
}

// readSSE calls onData with each event's data payload until the stream ends.
async function readSSE(resp, onData) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onData(data);
    }
  }
}

async function errorText(resp) {
  const body = await resp.text();
  try { return JSON.parse(body).error.message || body; } catch { return body || resp.statusText; }
}

// ---- chat playground

const messages = []; // {role, content} of the conversation so far, the system prompt excluded
let controller = null;

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const r = document.createElement("span");
  r.className = "role";
  r.textContent = role;
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  div.append(r, body);
  $("messages").append(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

function settings() {
  const body = {};
  const num = (id, parse) => { const v = $(id).value.trim(); if (v !== "") body[id] = parse(v); };
  num("temperature", parseFloat);
  num("top_p", parseFloat);
  num("max_tokens", (v) => parseInt(v, 10));
  const stop = $("stop").value.split("|").map((s) => s.replace(/\\n/g, "\n")).filter((s) => s !== "");
  if (stop.length) body.stop = stop.slice(0, 4);
  return body;
}

async function send(text) {
  if (controller || !text.trim()) return;
  messages.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  const content = div.querySelector(".content");
  content.dataset.testid = "reply";
  document.querySelectorAll('[data-testid="reply"]').forEach((el) => { if (el !== content) delete el.dataset.testid; });
  const sys = $("system").value.trim();
  const body = Object.assign(settings(), {
    messages: (sys ? [{ role: "system", content: sys }] : []).concat(messages),
    model: $("model-select").value || undefined,
    stream: true,
    stream_options: { include_usage: true },
  });
  controller = new AbortController();
  $("send").disabled = true;
  $("stop-btn").disabled = false;
  $("status").textContent = "generating…";
  const t0 = performance.now();
  let first = 0, finish = "", usage = null, failed = false;
  try {
    const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!resp.ok) throw new Error(resp.status + ": " + (await errorText(resp)));
    await readSSE(resp, (data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        if (c.delta && c.delta.content) {
          if (!first) first = performance.now();
          content.textContent += c.delta.content;
          $("messages").scrollTop = $("messages").scrollHeight;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
    div.dataset.done = "true";
  } catch (err) {
    if (err.name === "AbortError") finish = "stopped";
    else {
      failed = true;
      div.classList.add("error");
      content.textContent += (content.textContent ? "\n" : "") + String(err.message || err);
    }
  } finally {
    // A failed turn stays on screen but leaves the conversation; a stopped one keeps its text.
    if (failed) messages.pop();
    else messages.push({ role: "assistant", content: content.textContent });
    const meta = document.createElement("span");
    meta.className = "meta";
    const parts = [];
    if (finish) parts.push(finish);
    if (usage) parts.push(usage.completion_tokens + " tokens");
    if (first) parts.push("first token " + Math.round(first - t0) + " ms");
    parts.push(Math.round(performance.now() - t0) + " ms");
    if (body.model) parts.push(body.model);
    meta.textContent = parts.join(" · ");
    div.append(meta);
    controller = null;
    $("send").disabled = false;
    $("stop-btn").disabled = true;
    $("status").textContent = "";
  }
}

$("send-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("send-form").requestSubmit(); }
});
$("stop-btn").addEventListener("click", () => { if (controller) controller.abort(); });
function clearChat() { if (!controller) { messages.length = 0; $("messages").textContent = ""; } }
$("clear").addEventListener("click", clearChat);
// A conversation has one model: picking another starts a new conversation with it.
$("model-select").addEventListener("change", clearChat);

// ---- live view

let liveAbort = null;

function cell(row, v) {
  const td = document.createElement("td");
  td.textContent = v;
  row.append(td);
}

function fmt(v) { return v === 0 ? "0" : v < 10 ? v.toFixed(2) : v.toFixed(1); }

function pct(n, total) { return total > 0 ? (100 * n / total) + "%" : "0"; }

// REASONS says what set a step's budget, for each reason the engine gives (engine.BudgetReason).
const REASONS = {
  no_decode: "nobody was decoding: prompts may take the whole --batch-size",
  fixed: "no latency target (--target-itl 0): --batch-size and --chunk-size only",
  learning: "the step cost model is not fitted yet: one --chunk-size of prompt per step",
  target: "prompt chunks sized so that the step meets --target-itl",
  queue: "as target, relaxed (up to 2x) because requests wait for admission",
  floor: "decoding alone reaches the target: a minimal prompt chunk keeps prompts moving",
  batch_size: "the target allows more than --batch-size, which caps it",
};

// renderReasons fills the legend of the reasons, once.
function renderReasons() {
  const dl = $("reasons");
  for (const [k, v] of Object.entries(REASONS)) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    dl.append(dt, dd);
  }
}

function renderLive(s) {
  const c = s.counts;
  $("steps").textContent = c.steps;
  $("running").textContent = s.running;
  $("waiting").textContent = s.waiting;
  $("generated").textContent = c.generated;
  $("hits").textContent = c.lookup_hits + "/" + c.lookups;
  $("hits").title = c.lookup_cached + " of " + c.lookup_tokens + " tokens looked up were cached";
  $("preempted").textContent = c.preempted + " / " + c.rejected;
  $("kv-text").textContent = `${s.kv_used} used (${s.kv_shared} shared), ${s.kv_cached} cached, ${s.kv_total} total`;
  $("kv-shared").style.width = pct(s.kv_shared, s.kv_total);
  $("kv-used").style.width = pct(s.kv_used - s.kv_shared, s.kv_total);
  $("kv-cached").style.width = pct(s.kv_cached, s.kv_total);

  // A column's full height is the largest budget in view (the tokens a step could carry), so a
  // step's decode and prompt tokens show against what it could have carried, and its own budget
  // is the light column behind them. A segment with tokens keeps a pixel, so one token shows.
  const chart = $("chart");
  const max = Math.max(1, ...s.steps.map((st) => Math.max(st.budget, st.decode + st.prefill)));
  $("chart-scale").textContent = `full height: ${max} ${max === 1 ? "token" : "tokens"}, the largest budget in view`;
  chart.textContent = "";
  for (const st of s.steps) {
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.title = `step ${st.n}: ${st.decode} decode + ${st.prefill} prompt of a budget of ${st.budget} (${st.reason}: ${REASONS[st.reason] || "?"}), ${fmt(st.step_ms)} ms`;
    Object.assign(bar.dataset, { decode: st.decode, prefill: st.prefill, budget: st.budget });
    const seg = (cls, n) => {
      const d = document.createElement("div");
      d.className = cls;
      d.style.height = pct(n, max);
      if (n > 0) d.style.minHeight = "1px";
      return d;
    };
    bar.append(seg("budget", st.budget), seg("decode", st.decode), seg("prefill", st.prefill));
    chart.append(bar);
  }

  const rows = $("step-rows");
  rows.textContent = "";
  for (const st of s.steps.slice(-8).reverse()) {
    const tr = document.createElement("tr");
    for (const v of [st.n, st.decode, st.prefill, st.budget, st.reason, fmt(st.step_ms), st.running + "/" + st.waiting]) cell(tr, v);
    tr.children[4].title = REASONS[st.reason] || "";
    rows.append(tr);
  }
  const reqs = $("req-rows");
  reqs.textContent = "";
  for (const r of s.requests.slice().reverse()) {
    const tr = document.createElement("tr");
    for (const v of [r.n, r.prompt_tokens, r.cached_tokens, r.completion_tokens, fmt(r.queue_ms), fmt(r.ttft_ms), fmt(r.itl_ms), r.finish]) cell(tr, v);
    reqs.append(tr);
  }
}

async function live() {
  const ctl = new AbortController();
  liveAbort = ctl;
  while (!ctl.signal.aborted) {
    try {
      const resp = await fetch("/live", { headers: headers(), signal: ctl.signal });
      if (!resp.ok) throw new Error(resp.status + ": " + (await errorText(resp)));
      $("live-state").textContent = "live";
      await readSSE(resp, (data) => renderLive(JSON.parse(data)));
      $("live-state").textContent = "disconnected";
    } catch (err) {
      if (ctl.signal.aborted) return;
      $("live-state").textContent = String(err.message || err);
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

function restartLive() {
  if (liveAbort) liveAbort.abort();
  live();
}

// loadModel lists the models the server can serve (loaded or not) in the header and in the
// conversation's model picker, keeping the pick when it is still there.
async function loadModel() {
  try {
    const resp = await fetch("/v1/models", { headers: headers() });
    if (!resp.ok) return;
    const models = (await resp.json()).data;
    $("model").textContent = models.map((m) => m.id).join(", ");
    const sel = $("model-select");
    const keep = sel.value;
    sel.textContent = "";
    for (const m of models) {
      const opt = document.createElement("option");
      opt.value = m.id;
      opt.textContent = m.id + (m.status && m.status.value !== "loaded" ? " (" + m.status.value + ")" : "");
      sel.append(opt);
    }
    if (models.some((m) => m.id === keep)) sel.value = keep;
  } catch { /* the live view reports connection problems */ }
}

renderReasons();
loadModel();
live();
// ?q= only fills the message box: sending it on load would let any page that links or frames
// this one spend the API key stored here on a prompt of its choosing.
const q = new URLSearchParams(location.search).get("q");
if (q) {
  $("input").value = q;
  $("input").focus();
}
