"""The report as one self-contained HTML page: pure, a :class:`Report` in,
a string out, the same string for the same report.

No network and no external asset: the style, the script (search) and the
plots (SVG) are inline. Every text goes through :func:`html.escape`; a
redacted report has sizes where the texts were. A closed ``<details>`` is
not laid out, so a 1,000-turn session opens as fast as its summaries draw.
"""

from __future__ import annotations

from html import escape

from .gather import Lossless, MessageText, Report, Summary, Text, TurnView
from .plots import MARK_COLOURS, THREAD_COLOURS, line_chart, mark_kind, summary_map, timeline

STYLE = """
:root{--fg:#1f2937;--mute:#6b7280;--line:#e5e7eb;--bg:#f8fafc;--card:#fff;--acc:#2563eb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{position:sticky;top:0;z-index:5;background:#0f172a;color:#e2e8f0;padding:10px 20px;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
header h1{font-size:16px;margin:0;font-weight:600}
header .facts{color:#94a3b8;font-size:13px}
header input[type=search]{margin-left:auto;width:300px;padding:6px 10px;border-radius:6px;border:1px solid #334155;background:#1e293b;color:#f1f5f9;font-size:14px}
#hits{color:#fbbf24;font-size:13px;min-width:90px}
main{padding:14px 20px 40px;max-width:1400px;margin:0 auto}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:14px 0;padding:12px 16px}
h2{font-size:15px;margin:2px 0 10px}
.note{color:var(--mute);font-size:12.5px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:10px 24px}
svg.chart{width:100%;height:auto;display:block}
.chart .grid{stroke:var(--line);stroke-width:1}
.chart .ev{stroke-width:1;stroke-dasharray:3 3;opacity:.7}
.chart .series{stroke-width:1.8}
.chart text{font-size:11px;fill:var(--mute)}
.chart .ct{font-weight:600;fill:var(--fg);font-size:12px}
.chart .yl{text-anchor:end}.chart .xl{text-anchor:middle}.chart .lg{text-anchor:end}
.sbar{fill:#10b981;opacity:.85}.sbar.fb{fill:#f59e0b}
.legend span{display:inline-block;margin-right:14px;font-size:12.5px}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:4px;vertical-align:middle}
.turn{border-top:1px solid var(--line);scroll-margin-top:64px;content-visibility:auto;contain-intrinsic-size:auto 31px}
details.sum{scroll-margin-top:64px}
header label{display:flex;gap:4px;align-items:center}
.turn>summary{display:grid;grid-template-columns:52px 40px 1fr 150px 190px 120px 90px 80px;gap:8px;align-items:center;padding:5px 4px;cursor:pointer;list-style:none}
.turn>summary::-webkit-details-marker{display:none}
.turn>summary:hover{background:#f1f5f9}
.turn[open]>summary{background:#eff6ff}
.turn.hit>summary{background:#fef9c3}
.thead{display:grid;grid-template-columns:52px 40px 1fr 150px 190px 120px 90px 80px;gap:8px;padding:4px;color:var(--mute);font-size:12px;font-weight:600}
.n{font-weight:600;font-variant-numeric:tabular-nums}
.num{text-align:right;font-variant-numeric:tabular-nums}
.chip{display:inline-block;padding:0 6px;border-radius:9px;color:#fff;font-size:11.5px}
.badge{display:inline-block;padding:0 6px;margin:1px 3px 1px 0;border-radius:4px;font-size:11.5px;border:1px solid;background:#fff}
.bar{position:relative;height:10px;background:#e5e7eb;border-radius:5px;overflow:hidden}
.bar i{position:absolute;left:0;top:0;bottom:0;background:#3b82f6}
.bar i.full{background:#ef4444}
.bud{display:flex;gap:6px;align-items:center}.bud .bar{flex:1}.bud span{font-size:12px;width:42px;text-align:right}
.body{display:grid;grid-template-columns:1fr 1.3fr 1.3fr;gap:14px;padding:8px 6px 14px}
h3{font-size:13px;margin:10px 0 6px;color:#334155}.body h3{margin:4px 0 6px}
.cov{font-size:12px;font-weight:600;color:#475569;margin:6px 0 3px}
.body table{border-collapse:collapse;width:100%;font-size:12.5px}
.body td,.body th{padding:2px 6px;border-bottom:1px solid var(--line);text-align:left}
pre{white-space:pre-wrap;word-break:break-word;background:#f8fafc;border:1px solid var(--line);border-radius:6px;padding:6px 8px;margin:4px 0 8px;font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;max-height:340px;overflow:auto}
.msg{margin:0 0 6px}.role{font-size:11.5px;font-weight:600;color:#475569}
.role.user{color:#1d4ed8}.role.assistant{color:#047857}.role.toolResult{color:#b45309}.role.compactionSummary{color:#7c3aed}
.redacted{color:var(--mute);font-style:italic}
.heldl{font-size:12px;color:#475569}.heldl a{color:var(--acc);text-decoration:none}
.kv{display:grid;grid-template-columns:auto 1fr;gap:1px 10px;font-size:12.5px;margin-bottom:6px}.kv b{font-weight:500;color:var(--mute);white-space:nowrap}
details.sum{margin:3px 0 3px 14px;border-left:3px solid #10b981;padding-left:8px}
details.sum.fb{border-left-color:#f59e0b}
details.sum>summary{cursor:pointer;font-size:13px}
details.sum.hit>summary{background:#fef9c3}
mark{background:#fde047;padding:0}
table.calls{border-collapse:collapse;width:100%;font-size:12.5px}table.calls td,table.calls th{border-bottom:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top}
"""

SCRIPT = """
(function(){
var box=document.getElementById('q'),out=document.getElementById('hits'),timer=null;
var items=[].slice.call(document.querySelectorAll('.turn,.sum'));
var texts=null;
function clear(){document.querySelectorAll('mark').forEach(function(m){var p=m.parentNode;p.replaceChild(document.createTextNode(m.textContent),m);p.normalize();});
 items.forEach(function(e){e.classList.remove('hit');e.style.display='';});}
function mark(root,q){var w=document.createTreeWalker(root,NodeFilter.SHOW_TEXT,null),nodes=[],n;while((n=w.nextNode()))nodes.push(n);
 var count=0;nodes.forEach(function(t){var s=t.nodeValue,l=s.toLowerCase(),i=l.indexOf(q);if(i<0||count>200)return;var f=document.createDocumentFragment(),at=0;
 while(i>=0){f.appendChild(document.createTextNode(s.slice(at,i)));var m=document.createElement('mark');m.textContent=s.slice(i,i+q.length);f.appendChild(m);count++;at=i+q.length;i=l.indexOf(q,at);}
 f.appendChild(document.createTextNode(s.slice(at)));t.parentNode.replaceChild(f,t);});return count;}
function run(){clear();var q=box.value.trim().toLowerCase();if(!q){out.textContent='';return;}
 if(!texts)texts=items.map(function(e){return e.textContent.toLowerCase();});
 var turns=0,sums=0,first=null;
 items.forEach(function(e,k){var own=texts[k].indexOf(q)>=0;if(own){e.classList.add('hit');if(e.classList.contains('turn')){turns++;e.open=true;}else{sums++;e.open=true;var p=e.parentElement;while(p){if(p.tagName==='DETAILS')p.open=true;p=p.parentElement;}}if(!first)first=e;}
  else if(e.classList.contains('turn')&&document.getElementById('only').checked)e.style.display='none';});
 var marks=0;items.forEach(function(e){if(e.classList.contains('hit')&&marks<2000)marks+=mark(e.querySelector('.body')||e,q);});
 out.textContent=turns+(turns===1?' turn, ':' turns, ')+sums+(sums===1?' summary':' summaries');if(first)first.scrollIntoView({block:'center'});}
box.addEventListener('input',function(){clearTimeout(timer);timer=setTimeout(run,150);});
document.getElementById('only').addEventListener('change',run);
})();
"""


def _e(s: object) -> str:
    return escape(str(s), quote=True)


def _num(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}{unit}"
    return f"{v:,}{unit}"


def _text(t: Text | None, empty: str = "(none)") -> str:
    if t is None:
        return f'<div class="note">{empty}</div>'
    if t.text is None:
        return f'<div class="redacted">[{t.chars:,} characters, redacted]</div>'
    return f"<pre>{_e(t.text)}</pre>"


def _message(m: MessageText, where: str = "") -> str:
    tool = f" · {_e(m.tool)}" if m.tool else ""
    return f'<div class="msg">{where}<span class="role {_e(m.role)}">{_e(m.role)}{tool}</span> <span class="note">{m.body.chars:,} chars</span>{_text(m.body)}</div>'


def _badge(mark: str) -> str:
    colour = MARK_COLOURS[mark_kind(mark)]
    return f'<span class="badge" style="color:{colour};border-color:{colour}">{_e(mark)}</span>'


def _budget_share(t: TurnView, engine_budget: int | None) -> float | None:
    budget = _budget(t, engine_budget)
    if t.estimated_tokens is None or not budget:
        return None
    return 100.0 * t.estimated_tokens / budget


def _budget(t: TurnView, engine_budget: int | None) -> int | None:
    """The budget the engine kept to: its own when smaller (``lossless``'s
    ``token_budget``), else the one the sidecar gave it."""
    budgets = [b for b in (t.budget, engine_budget) if b]
    return min(budgets) if budgets else None


def _cached_share(t: TurnView) -> float | None:
    if not t.codex_input or t.cached_input is None:
        return None
    return 100.0 * t.cached_input / t.codex_input


def _turn(t: TurnView, lane: int, engine_budget: int | None) -> str:
    colour = THREAD_COLOURS[lane % len(THREAD_COLOURS)]
    share = _budget_share(t, engine_budget)
    cached = _cached_share(t)
    bar = (
        f'<div class="bud"><div class="bar"><i class="{"full" if share >= 100 else ""}" style="width:{min(share, 100):.1f}%"></i></div><span>{share:.0f}%</span></div>'
        if share is not None
        else '<span class="note">-</span>'
    )
    assembled = f"{_num(t.assembled_count)} msgs · {_num(t.estimated_tokens)} tok" if t.recorded else '<span class="note">no record</span>'
    head = (
        f'<summary><span class="n">#{t.n}</span><span class="chip" style="background:{colour}" title="{_e(t.thread)}">T{lane + 1}</span>'
        f"<span>{_e(t.status or '-')} {''.join(_badge(m) for m in t.marks)}</span>"
        f"<span>{assembled}</span>{bar}"
        f'<span class="num">{_num(t.codex_input)}</span><span class="num">{"-" if cached is None else f"{cached:.0f}%"}</span>'
        f'<span class="num">{_num(t.hold_ms, " ms")}</span></summary>'
    )
    # One text node, not a table: a 1,000-turn page parses 64 rows a turn otherwise.
    first = (t.assembled_count or len(t.assembled)) - len(t.assembled) + 1
    rows = "\n".join(f"{first + k:>4}  {role:<18}{chars:>8,} chars" for k, (role, chars) in enumerate(t.assembled))
    omitted = f'<div class="note">the newest {len(t.assembled)} listed; {t.assembled_omitted} older not</div>' if t.assembled_omitted else ""
    budget = _budget(t, engine_budget)
    engine = (
        f'<div class="kv"><b>mode</b><span>{_e(t.mode or "-")}</span><b>messages</b><span>{_num(t.assembled_count)}</span>'
        f"<b>tokens</b><span>{_num(t.estimated_tokens)} of {_num(budget)}{'' if share is None else f' ({share:.0f}%)'}</span>"
        f"<b>fallback</b><span>{_e(t.fallback or 'none')}</span></div>"
        f"{omitted}<pre class=roles>{_e(rows)}</pre>"
        if t.recorded
        else '<div class="note">No inspection record for this turn (no engine, or the record was lost).</div>'
    )
    held = t.held_before
    sent = (
        f'<div class="kv"><b>channels</b><span>{_e(", ".join(t.channels) or "none (the client’s input as it was)")}</span>'
        f"<b>input chars</b><span>{_num(t.original_chars)} from the client → {_num(t.sent_chars)} sent</span>"
        f"<b>thread held</b><span>{'-' if held is None else f'{held[0]:,} messages, {held[1]:,} chars'} before{', then rebuilt' if t.rebuilt else ''}; {_num(t.held_after)} after</span>"
        f"{_held(t)}"
        f"<b>Codex input</b><span>{_num(t.codex_input)} tokens, {_num(t.cached_input)} cached</span>"
        f"<b>held for</b><span>{_num(t.hold_ms, ' ms')}{'' if t.revert_ms is None else f' (revert {t.revert_ms:,.1f} ms)'}</span></div>"
        f"<h3>input sent</h3>{_text(t.sent_input, 'the client’s input, unchanged (see the transcript)')}"
        f"<h3>additionalContext sent</h3>{_text(t.sent_context, '(none this turn)')}"
    )
    calls = "".join(
        f'<div class="msg"><span class="role">{_e(c.tool)}</span> <span class="note">{"ok" if c.success else "failed"}, {_num(c.ms, " ms")}</span>'
        f"{_text(c.arguments)}{_text(c.result)}</div>"
        for c in t.engine_tools
    )
    transcript = "".join(_message(m) for m in t.messages) or '<div class="note">nothing in the transcript</div>'
    if calls:
        transcript = f"<h3>engine tool calls (the client never saw them)</h3>{calls}<h3>transcript</h3>{transcript}"
    return (
        f'<details class="turn" id="turn-{t.n}" data-thread="{_e(t.thread)}" data-turn="{_e(t.turn_id)}">{head}'
        f'<div class="body"><div><h3>Engine assembled</h3>{engine}</div><div><h3>Sidecar gave Codex</h3>{sent}</div>'
        f'<div><h3>The turn (transcript)</h3><div class="note">{_e(t.turn_id)} · {_e(t.started or "")}</div>{transcript}</div></div></details>'
    )


def _held(t: TurnView) -> str:
    """The newest messages the Codex thread held before the turn, each a link
    to the turn that said it (``?``: the engine's own, as a summary)."""
    if not t.held_newest or t.held_before is None:
        return ""
    older = t.held_before[0] - len(t.held_newest)
    items = " · ".join(
        (f'<a href="#turn-{n}">#{n}</a> ' if n is not None else "") + f"{_e(role if role != '?' else 'not in the transcript')} {chars:,}"
        for role, chars, n in t.held_newest
    )
    return f"<b>held, newest</b><span class=heldl>{f'… {older:,} older · ' if older > 0 else ''}{items}</span>"


def _summary(s: Summary, by_id: dict[str, Summary]) -> str:
    cls = "sum fb" if s.fallback else "sum"
    kind = "extractive stand-in" if s.fallback else "model summary"
    covered = "".join(_message(m, f'<span class="note">#{seq}</span> ') for seq, m in s.covered)
    if s.covered and s.covered_count > len(s.covered):
        covered += f'<div class="note">{s.covered_count - len(s.covered)} more messages</div>'
    kids = "".join(_summary(by_id[c], by_id) for c in s.children if c in by_id)
    after = "" if s.after_turn is None else f' · after <a href="#turn-{s.after_turn}">turn {s.after_turn}</a>'
    return (
        f'<details class="{cls}" id="{_e(s.id)}"><summary><b>d{s.depth}</b> messages {s.seq[0]}–{s.seq[1]} · {s.tokens:,} tokens '
        f"(from {s.source_tokens:,}) · {kind}{after} <span class=note>{_e(s.id)}</span></summary>{_text(s.body)}"
        f"{f'<div class=cov>covers messages {s.seq[0]}–{s.seq[1]}:</div>' + covered if covered else ''}{kids}</details>"
    )


def _lossless(lossless: Lossless, turns: list[TurnView]) -> str:
    by_id = {s.id: s for s in lossless.summaries}
    roots = [s for s in lossless.summaries if s.parent is None or s.parent not in by_id]
    max_seq = max((s.seq[1] for s in lossless.summaries), default=lossless.messages)
    rows = [(s.id, s.depth, s.seq[0], s.seq[1], s.fallback) for s in lossless.summaries]
    calls = [(t, c) for t in turns for c in t.engine_tools]
    table = "".join(
        f'<tr><td><a href="#turn-{t.n}">#{t.n}</a></td><td>{_e(c.tool)}</td><td>{_text(c.arguments)}</td><td>{_text(c.result)}</td><td>{"ok" if c.success else "failed"}</td></tr>'
        for t, c in calls
    )
    return (
        f'<section id="lossless"><h2>lossless: summaries and recall</h2>'
        f'<div class="note">{lossless.messages:,} messages stored ({lossless.message_tokens:,} tokens), {len(lossless.summaries):,} summaries, '
        f"{lossless.steps:,} compaction steps; the frame now: {lossless.frame_summaries} summaries, {lossless.frame_tokens:,} tokens"
        f"{'' if lossless.budget is None else f'; engine budget {lossless.budget:,} tokens'} · {_e(lossless.where)}</div>"
        f"{summary_map(rows, max_seq)}"
        f'<div class="legend note"><span><i class="dot" style="background:#10b981"></i>model summary</span><span><i class="dot" style="background:#f59e0b"></i>extractive stand-in</span>'
        f"<span>a bar spans the messages (by sequence) it covers; deeper summaries condense shallower ones</span></div>"
        f"<h3>the summary DAG (newest condensation at the top; open one for its text and what it covers)</h3>{''.join(_summary(s, by_id) for s in roots)}"
        f"<h3>recall tool calls ({len(calls)})</h3>"
        + (f'<table class="calls"><tr><th>turn</th><th>tool</th><th>arguments</th><th>result</th><th></th></tr>{table}</table>' if calls else '<div class="note">none</div>')
        + "</section>"
    )


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _totals(turns: list[TurnView]) -> str:
    """One line of the session's figures."""
    rebuilds = sum(t.rebuilt for t in turns)
    switches = sum(t.switched for t in turns)
    fallbacks = sum(bool(t.fallback) for t in turns)
    failed = sum(t.finalize_ok is False or t.status not in (None, "completed") for t in turns)
    sent = sum(t.codex_input or 0 for t in turns)
    cached = sum(t.cached_input or 0 for t in turns if t.codex_input)
    holds = sorted(t.hold_ms for t in turns if isinstance(t.hold_ms, (int, float)))
    median = f"{holds[len(holds) // 2]:,.1f} ms" if holds else "-"
    share = f"{100 * cached / sent:.0f}%" if sent else "-"
    return (
        f'<div class="note totals">{_n(len(turns), "turn")} · {_n(rebuilds, "rebuild")} ({switches} onto a fresh thread) · {_n(fallbacks, "fallback")} · '
        f"{failed} failed · Codex input {sent:,} tokens, {share} cached · hold median {median}</div>"
    )


def render(report: Report) -> str:
    """The whole page."""
    turns = report.turns
    lanes = {th.thread: k for k, th in enumerate(report.threads)}
    engine_budget = report.lossless.budget if report.lossless is not None else None
    marks = [t.marks for t in turns]
    n_threads = len(report.threads)
    tokens = line_chart(
        "tokens per turn",
        [
            ("Codex input", "#2563eb", [t.codex_input for t in turns]),
            ("assembled (est.)", "#059669", [t.estimated_tokens for t in turns]),
        ],
        marks=marks,
        chart_id="plot-tokens",
    )
    cached = line_chart("cached share of Codex input", [("cached", "#7c3aed", [_cached_share(t) for t in turns])], y_max=100, unit="%", marks=marks, chart_id="plot-cached")
    budget = line_chart("budget used by the assembly", [("of budget", "#d97706", [_budget_share(t, engine_budget) for t in turns])], y_max=100, unit="%", marks=marks, chart_id="plot-budget")
    held = line_chart("messages the Codex thread held before the turn", [("held", "#0891b2", [float(t.held_before[0]) if t.held_before else None for t in turns])], marks=marks, chart_id="plot-held")
    legend = "".join(f'<span><i class="dot" style="background:{c}"></i>{k}</span>' for k, c in MARK_COLOURS.items())
    threads = "".join(
        f'<span><i class="dot" style="background:{THREAD_COLOURS[k % len(THREAD_COLOURS)]}"></i>T{k + 1} {_e(th.thread)} ({_e(th.via)}, {th.turns} turns'
        f"{'' if th.first is None else f', from #{th.first}'})</span>"
        for k, th in enumerate(report.threads)
    )
    body = "".join(_turn(t, lanes.get(t.thread, 0), engine_budget) for t in turns)
    redacted = " · <b>redacted</b> (sizes only)" if report.redacted else ""
    engine = " · lossless" if report.lossless is not None else ""
    error = f'<section><b>lossless store not read:</b> {_e(report.lossless_error)}</section>' if report.lossless_error else ""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; script-src \'unsafe-inline\'; img-src data:">'
        f"<title>codex-sidecar view · {_e(report.session)}</title><style>{STYLE}</style></head><body>"
        f'<header><h1>codex-sidecar view</h1><span class="facts">session {_e(report.session)} · {len(turns):,} turns · {n_threads} Codex thread{"s" if n_threads != 1 else ""}{engine}{redacted}</span>'
        f'<input id="q" type="search" placeholder="search the session’s text" autocomplete="off"><label class="facts"><input id="only" type="checkbox"> only hits</label><span id="hits"></span></header>'
        f"<main>{error}"
        f'<section id="overview"><h2>Timeline</h2>{_totals(turns)}{timeline([th.thread for th in report.threads], [lanes.get(t.thread, 0) for t in turns], marks)}'
        f'<div class="legend note">{threads}</div><div class="legend note">{legend}</div></section>'
        f'<section id="plots"><h2>Over the turns</h2><div class="charts">{tokens}{cached}{budget}{held}</div>'
        f'<div class="note">Dashed lines: rotations (a new Codex thread), fallbacks, failures, and rebuilds and switches in a short session; ticks under each axis: every mark, coloured as in the timeline. Budget: what the engine assembled against the budget it kept to.</div></section>'
        f'<section id="turns"><h2>Turns</h2><div class="note">Open a turn: what the engine assembled, beside what the sidecar gave Codex and what the turn said.</div>'
        f'<div class="thead"><span>turn</span><span>thread</span><span>status · marks</span><span>assembled</span><span>budget used</span><span class="num">Codex input</span><span class="num">cached</span><span class="num">hold</span></div>'
        f"{body}</section>"
        f"{_lossless(report.lossless, turns) if report.lossless is not None else ''}"
        f"</main><script>{SCRIPT}</script></body></html>\n"
    )
