"""The trajectory viewer's page: one HTML file with the data embedded as JSON and a small
script that filters, searches and renders one page of rows at a time (eval/view.py).

Letters of a record's ``why`` (training/runs/samples.py) become token classes: ``L`` carries
loss; ``o`` observation / template; ``e`` error-turn mask; ``p`` outside the phase prefix;
``d`` not in the update.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rex.trust import FLAGS

PAGE_SIZE = 50
"""Rows per page: the DOM never holds more trajectory rows than this."""

CSS = """
body{font-family:system-ui,sans-serif;margin:1em 2em;color:#222}
#filters{display:flex;flex-wrap:wrap;gap:.6em;align-items:end;position:sticky;top:0;background:#fff;padding:.5em 0;
border-bottom:1px solid #ddd;z-index:1}
#filters label{display:flex;flex-direction:column;font-size:12px;color:#555}
#filters input[type=number]{width:6em}#q{width:18em}
.traj{border:1px solid #ddd;border-radius:4px;margin:.3em 0}
.head{padding:.3em .6em;cursor:pointer;display:flex;gap:1em;font-size:14px}.head:hover{background:#f6f6f6}
.head .q{flex:1;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.o-match{color:#1a7f37;font-weight:600}.flags{color:#9a6700;font-size:12px}.o-mismatch,.o-pred_error,.o-pred_timeout,.o-pred_too_large{color:#b42318}
.body{padding:.5em 1em;border-top:1px solid #eee;font-size:13px}
.seg{margin:.4em 0;border-left:3px solid #999;padding-left:.5em}.seg.obs{border-color:#d0a000;background:#fffbea}
.seg .sh{font-size:12px;color:#555;margin-bottom:.2em}
.tokens{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
.tok{box-shadow:inset -1px 0 #fff}
.tok.L{background:#c8f0c8}.tok.o{background:#eee;color:#777}.tok.e{background:#f9caca}
.tok.p{background:#d6e4ff}.tok.d{background:#f3e8ff;color:#555}
.legend span{padding:0 .4em;margin-right:.5em;font-size:12px}
.sbs{display:flex;gap:1em;flex-wrap:wrap}.sbs>div{flex:1;min-width:18em;overflow:auto}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}th{background:#f3f3f3}
pre{background:#f7f7f7;padding:.4em;white-space:pre-wrap;margin:.2em 0}
#pager{margin:.6em 0;display:flex;gap:.6em;align-items:center}
"""

SCRIPT = r"""
const DATA = JSON.parse(document.getElementById('data').textContent);
const ROWS = DATA.rows, PROMPTS = DATA.prompts, PAGE = DATA.page_size, VOCAB = DATA.vocab, FLAGS = DATA.flags;
// packed per-token data (view_page.pack): token ids into VOCAB, turns as [turn, count] runs
function tokensOf(r) { return r.tk ? r.tk.map(i => VOCAB[i]) : []; }
function turnsOf(r) { const out = []; for (const [t, n] of r.tn || []) for (let k = 0; k < n; k++) out.push(t); return out; }
const WHY = {L: 'carries loss', o: 'observation / template (masked)', e: 'error-turn mask',
             p: 'outside the phase prefix (schema track)', d: 'not in the update (group dropped)'};
const state = {page: 0, shown: ROWS.map((_, i) => i), track: 'full', hay: new Array(ROWS.length)};
const $ = id => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function distinct(key) {
  return [...new Set(ROWS.map(r => r[key]).filter(v => v !== null && v !== undefined && v !== ''))]
    .sort((a, b) => (typeof a === 'number' && typeof b === 'number') ? a - b : String(a).localeCompare(String(b)));
}
function fillSelect(id, key) {
  const s = $(id);
  for (const v of distinct(key)) { const o = el('option', '', v); o.value = String(v); s.appendChild(o); }
}
function haystack(i) {
  if (state.hay[i] === undefined) {
    const r = ROWS[i];
    state.hay[i] = [r.question, r.evidence, r.gold_sql, r.final_sql, r.example_id, r.db_id, r.text,
                    (r.trust_flags || []).join(' '), tokensOf(r).join('')].join('\n').toLowerCase();
  }
  return state.hay[i];
}
function apply() {
  const f = {outcome: $('f-outcome').value, difficulty: $('f-difficulty').value, design: $('f-design').value,
             step: $('f-step').value, lo: parseFloat($('f-rmin').value), hi: parseFloat($('f-rmax').value),
             q: $('q').value.trim().toLowerCase()};
  state.shown = [];
  ROWS.forEach((r, i) => {
    if (f.outcome && String(r.outcome) !== f.outcome) return;
    if (f.difficulty && String(r.difficulty) !== f.difficulty) return;
    if (f.design && String(r.design) !== f.design) return;
    if (f.step && String(r.step) !== f.step) return;
    if (!isNaN(f.lo) && !(r.reward >= f.lo)) return;
    if (!isNaN(f.hi) && !(r.reward <= f.hi)) return;
    if (f.q && !haystack(i).includes(f.q)) return;
    state.shown.push(i);
  });
  state.page = 0;
  render();
}
function render() {
  const list = $('list');
  list.replaceChildren();
  const pages = Math.max(1, Math.ceil(state.shown.length / PAGE));
  state.page = Math.min(state.page, pages - 1);
  const start = state.page * PAGE, part = state.shown.slice(start, start + PAGE);
  for (const i of part) list.appendChild(rowElement(i));
  $('count').textContent = `${state.shown.length} of ${ROWS.length} trajectories`;
  $('pageinfo').textContent = state.shown.length ?
    `rows ${start + 1}-${start + part.length}, page ${state.page + 1} of ${pages}` : 'nothing matches';
  $('prev').disabled = state.page === 0;
  $('next').disabled = state.page >= pages - 1;
}
function fmt(x) { return (typeof x === 'number') ? (Math.round(x * 1000) / 1000).toString() : (x ?? '-'); }
function rowElement(i) {
  const r = ROWS[i], box = el('div', 'traj');
  box.dataset.i = i;
  const head = el('div', 'head');
  head.append(el('span', '', r.step === null || r.step === undefined ? 'eval' : `step ${r.step}`),
              el('span', '', [r.design, r.role].filter(Boolean).join(' / ')), el('span', '', r.difficulty || ''),
              el('span', 'o-' + r.outcome, r.outcome || '-'), el('span', '', 'reward ' + fmt(r.reward)),
              el('span', 'flags', (r.trust_flags || []).length ? 'flags: ' + r.trust_flags.join(', ') : ''),
              el('span', 'q', r.question || r.example_id));
  const body = el('div', 'body');
  body.hidden = true;
  head.addEventListener('click', () => {
    if (!body.dataset.built) { buildBody(r, body); body.dataset.built = '1'; }
    body.hidden = !body.hidden;
  });
  box.append(head, body);
  return box;
}
function table(t) {
  if (!t) return el('p', '', 'no result (no SQL)');
  if (t.error) return el('pre', '', t.error);
  const tab = el('table'), hr = el('tr');
  for (const c of t.columns || []) hr.appendChild(el('th', '', c));
  tab.appendChild(hr);
  for (const row of t.rows || []) {
    const tr = el('tr');
    for (const c of row) tr.appendChild(el('td', '', c === null ? 'NULL' : c));
    tab.appendChild(tr);
  }
  const wrap = el('div');
  wrap.append(tab, el('small', '', `${t.row_count ?? (t.rows || []).length} row(s)${t.truncated ? ', cut' : ''}`));
  return wrap;
}
function kv(title, obj) {
  const tab = el('table', 'kv'), hr = el('tr');
  hr.append(el('th', '', title), el('th', '', 'value'));
  tab.appendChild(hr);
  for (const [k, v] of Object.entries(obj || {})) {
    const tr = el('tr'); tr.append(el('td', '', k), el('td', '', fmt(v))); tab.appendChild(tr);
  }
  return tab;
}
function segments(r, tokens) {
  const out = [], turn = turnsOf(r), pol = r.policy || '';
  for (let j = 0; j < tokens.length; j++) {
    const key = turn[j] + ':' + pol[j], last = out[out.length - 1];
    if (last && last.key === key) last.end = j + 1; else out.push({key, turn: turn[j], policy: pol[j], start: j, end: j + 1});
  }
  return out;
}
function buildTokens(r, holder) {
  holder.replaceChildren();
  const why = (r.why || {})[state.track] || (r.why || {}).full || '';
  const turns = Object.fromEntries((r.turns || []).map(t => [t.index, t])), tokens = tokensOf(r);
  for (const s of segments(r, tokens)) {
    const t = turns[s.turn] || {}, seg = el('div', s.policy === '1' ? 'seg' : 'seg obs');
    seg.dataset.turn = s.turn;
    const head = s.policy === '1'
      ? `turn ${s.turn} · ${r.role || 'assistant'} · phase ${t.phase || '-'} · ${t.format_ok === false ? 'format failed: ' + (t.format_reason || '') : 'format ok'}`
      : `observation · ${t.tool ? 'tool ' + t.tool + ' → ' + (t.tool_outcome || '') : 'template / environment'}`;
    seg.appendChild(el('div', 'sh', head));
    if (s.policy === '1' && t.tool) seg.appendChild(el('pre', 'call', `${t.tool}(${JSON.stringify(t.arguments || {})})`));
    const toks = el('div', 'tokens');
    for (let j = s.start; j < s.end; j++) {
      const w = why[j] || 'o', span = el('span', 'tok ' + w, tokens[j]);
      span.title = WHY[w];
      toks.appendChild(span);
    }
    seg.appendChild(toks);
    holder.appendChild(seg);
  }
}
function buildBody(r, body) {
  body.appendChild(el('div', 'meta', `example ${r.example_id} · db ${r.db_id} · ${r.group ? 'group ' + r.group + ' #' + r.sample + ' · ' : ''}ended: ${r.end_reason || '-'}`));
  body.appendChild(el('p', 'question', r.question || ''));
  if (r.evidence) body.appendChild(el('p', 'evidence', 'evidence: ' + r.evidence));
  const prompt = PROMPTS[r.prompt_id];
  if (prompt) {
    const d = el('details'); d.appendChild(el('summary', '', 'prompt'));
    for (const m of prompt) d.appendChild(el('pre', '', `[${m.role}] ${m.content}`));
    body.appendChild(d);
  }
  const sql = el('div', 'sbs'), g = el('div'), p = el('div');
  g.append(el('b', '', 'gold'), el('pre', '', r.gold_sql || ''), table((r.tables || {}).gold));
  p.append(el('b', '', 'predicted'), el('pre', '', r.final_sql || '(no final SQL)'), table((r.tables || {}).pred));
  sql.append(g, p);
  body.appendChild(sql);
  const rw = el('div', 'sbs');
  const comp = Object.assign({total: r.reward}, r.components || {});
  rw.append(kv('reward', comp), kv('track', r.tracks), kv('advantage', r.advantage || {'in update': 'no'}));
  body.appendChild(rw);
  if ((r.trust_flags || []).length) body.appendChild(kv('trust flag', Object.fromEntries(r.trust_flags.map(f => [f, FLAGS[f] || '']))));
  if (r.tk && r.tk.length) {
    const tracks = Object.keys(r.why || {}), bar = el('div', 'legend');
    for (const [k, v] of Object.entries(WHY)) bar.appendChild(el('span', 'tok ' + k, v));
    body.appendChild(bar);
    const holder = el('div', 'turns');
    if (tracks.length > 1) {
      const pick = el('select', 'track');
      for (const t of tracks) { const o = el('option', '', 'loss track: ' + t); o.value = t; pick.appendChild(o); }
      pick.value = state.track in r.why ? state.track : 'full';
      pick.addEventListener('change', () => { state.track = pick.value; buildTokens(r, holder); });
      body.appendChild(pick);
    }
    buildTokens(r, holder);
    body.appendChild(holder);
  } else if (r.text) {
    body.append(el('b', '', 'last turn'), el('pre', '', r.text));
  }
}
for (const [id, key] of [['f-outcome', 'outcome'], ['f-difficulty', 'difficulty'], ['f-design', 'design'], ['f-step', 'step']])
  fillSelect(id, key);
for (const id of ['f-outcome', 'f-difficulty', 'f-design', 'f-step', 'f-rmin', 'f-rmax']) $(id).addEventListener('change', apply);
$('q').addEventListener('input', apply);
$('prev').addEventListener('click', () => { state.page--; render(); });
$('next').addEventListener('click', () => { state.page++; render(); });
render();
document.body.dataset.ready = '1';
window.viewReadyMs = performance.now();  // read by benchmarks/bench_viewer.py
"""


def _select(ident: str, label: str) -> str:
    return f'<label>{label}<select id="{ident}"><option value="">all</option></select></label>'


def pack(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows with their per-token lists made small: each distinct token string once in a
    vocabulary (``tk``: indices into it) and turn indices as ``[turn, count]`` runs (``tn``).

    >>> pack([{"tokens": ["a", "b", "a"], "turn": [0, 0, 1], "x": 1}])
    ([{'x': 1, 'tk': [0, 1, 0], 'tn': [[0, 2], [1, 1]]}], ['a', 'b'])
    """
    vocab: dict[str, int] = {}
    out = []
    for row in rows:
        packed = {k: v for k, v in row.items() if k not in ("tokens", "turn")}
        if row.get("tokens"):
            packed["tk"] = [vocab.setdefault(t, len(vocab)) for t in row["tokens"]]
            runs: list[list[int]] = []
            for t in row.get("turn") or []:
                if runs and runs[-1][0] == t:
                    runs[-1][1] += 1
                else:
                    runs.append([t, 1])
            packed["tn"] = runs
        out.append(packed)
    return out, list(vocab)


def render_page(rows: Sequence[Mapping[str, Any]], prompts: Mapping[str, Any], title: str) -> str:
    """The whole page as a string; ``rows`` as training/runs/samples.py writes them (or eval rows)."""
    packed, vocab = pack(rows)
    data = json.dumps(
        {"rows": packed, "vocab": vocab, "prompts": dict(prompts), "page_size": PAGE_SIZE, "flags": FLAGS},
        separators=(",", ":"),
        ensure_ascii=False,
    ).replace("</", "<\\/")
    filters = "".join(
        [
            _select("f-outcome", "outcome"),
            _select("f-difficulty", "difficulty"),
            _select("f-design", "design"),
            _select("f-step", "step"),
            '<label>reward &ge;<input id="f-rmin" type="number" step="any"></label>',
            '<label>reward &le;<input id="f-rmax" type="number" step="any"></label>',
            '<label>search<input id="q" type="search" placeholder="question, SQL, tokens..."></label>',
            '<b id="count"></b>',
        ]
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Trajectories: {html.escape(title)}</title>
<style>{CSS}</style></head><body>
<h1>Trajectories</h1><p>{html.escape(title)}</p>
<div id="filters">{filters}</div>
<div id="list"></div>
<div id="pager"><button id="prev">previous</button><span id="pageinfo"></span><button id="next">next</button></div>
<script id="data" type="application/json">{data}</script>
<script>{SCRIPT}</script>
</body></html>
"""
