"""One self-contained `report.html` per run: tables, plots, manifest, failed cells and a sample browser.

Why self-contained: a report is mailed, attached to CI artifacts and opened years later, so it carries
its CSS, its script and its plots (PNG as data URIs) and loads nothing from the network. Every string
from the run (system, task, sample text, error) is HTML-escaped when rendered on the server side, and
the sample browser's data is embedded as JSON with `<` escaped and inserted with `textContent` only, so a
sample that contains `<script>` is shown, never run.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from bench.store import RunStore, atomic_write_text, read_jsonl
from reports.table import Table

MAX_SAMPLES_PER_CELL = 50
MAX_SAMPLES_TOTAL = 3000
MAX_TEXT_CHARS = 4000
_ARROW = {"up": "\u2191", "down": "\u2193"}


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_table_html(table: Table) -> str:
    """An HTML table with the same cells, bold and arrows as the LaTeX one; provenance as tooltips."""
    head = "".join(
        f"<th>{esc(c.label)}{(' ' + _ARROW[c.better]) if c.better in _ARROW else ''}</th>"
        for c in table.columns
    )
    body: list[str] = []
    grouped = len(table.groups) > 1 or any(g.label for g in table.groups)
    for group in table.groups:
        if grouped and group.label:
            body.append(
                f'<tr class="group"><th colspan="{1 + len(table.columns)}">{esc(group.label)}</th></tr>'
            )
        for row in group.rows:
            cells = []
            for col in table.columns:
                cell = table.cell(row.key, col.key)
                text = esc(cell.text(table.show_std))
                text = f"<strong>{text}</strong>" if cell.bold else text
                cells.append(f'<td title="{esc(cell.provenance)}">{text}</td>')
            body.append(
                f'<tr class="system-row" data-system="{esc(row.key)}"><th>{esc(row.label)}</th>{"".join(cells)}</tr>'
            )
    caption = f"<caption>{esc(table.caption)}</caption>" if table.caption else ""
    notes = f'<p class="notes">{esc(" ".join(table.notes))}</p>' if table.notes else ""
    return (
        f'<table class="bench" id="table-{esc(table.name)}">{caption}<thead><tr><th>{esc(table.row_header)}</th>'
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{notes}"
    )


def render_reproduction_html(repro: Any) -> str:
    """The reproduction view: "ours / paper ↑" per cell; green where ours is better, red where worse."""
    head = "".join(
        f"<th>{esc(c.label)}{(' ' + _ARROW[c.better]) if c.better in _ARROW else ''}</th>"
        for c in repro.columns
    )
    body = []
    for r in repro.rows:
        cells = []
        for c in repro.columns:
            cell = repro.cell(r.key, c.key)
            cls = {True: "better", False: "worse"}.get(cell.better, "")
            title = f"ours: {cell.ours.provenance}; published: {cell.paper.provenance}"
            cells.append(f'<td class="{cls}" title="{esc(title)}">{esc(cell.text(c.decimals))}</td>')
        body.append(
            f'<tr class="repro-row" data-system="{esc(r.key)}"><th>{esc(r.label)}</th>{"".join(cells)}</tr>'
        )
    return (
        f'<table class="bench repro" id="repro-{esc(repro.name)}"><caption>{esc(repro.caption)}</caption>'
        f"<thead><tr><th>System</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f'<p class="notes">{esc(" ".join(repro.notes))}</p>'
    )


def sample_rows(run_dir: Path | str) -> tuple[list[dict[str, Any]], int]:
    """Rows for the sample browser (capped per cell and in total) and how many samples were left out."""
    rows: list[dict[str, Any]] = []
    left_out = 0
    for cell in RunStore(run_dir).iter_cells():
        samples = read_jsonl(cell.path / "samples.jsonl")
        for i, s in enumerate(samples):
            if i >= MAX_SAMPLES_PER_CELL or len(rows) >= MAX_SAMPLES_TOTAL:
                left_out += 1
                continue
            scored = s.get("scored") or {}
            status = scored.get("status") or s.get("status") or "unscored"
            text = str(s.get("text", ""))
            rows.append(
                {
                    "system": cell.key.system,
                    "task": cell.key.task,
                    "seed": cell.key.seed,
                    "index": s.get("index", i),
                    "status": status,
                    "valid": status == "ok",
                    "tsr": scored.get("tsr"),
                    "why": why_text(scored),
                    "kinds": [str(x) for x in (scored.get("tsr_failures") or [])],
                    "error": s.get("error") or scored.get("error") or "",
                    "text": text[:MAX_TEXT_CHARS] + ("\u2026" if len(text) > MAX_TEXT_CHARS else ""),
                }
            )
    return rows, left_out


def why_text(scored: dict[str, Any]) -> str:
    """Why a sample failed, in words: the failed checks, then the validator's own messages
    (`flight_number: 'SAS3' does not match ...`), which say what to fix."""
    kinds = [str(x) for x in (scored.get("tsr_failures") or [])]
    messages = [str(m) for m in (scored.get("schema_messages") or [])]
    parts = [k for k in kinds if not (k == "schema_invalid" and messages)]
    return "; ".join(parts + messages)


def _json_for_script(obj: Any) -> str:
    """JSON safe inside <script type="application/json">: no '<' can close the element."""
    return (
        json.dumps(obj, ensure_ascii=False, allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _img(name: str, path: Path) -> str:
    from reports.plots import plot_caption

    title, caption = plot_caption(name)
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure id="plot-{esc(name)}"><img alt="{esc(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption><b>{esc(title)}.</b> {esc(caption)}</figcaption></figure>"
    )


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
table.bench,table.samples,table.failed{border-collapse:collapse;margin:1em 0;font-size:13px}
table.bench td,table.bench th,table.samples td,table.samples th,table.failed td,table.failed th{
 padding:3px 8px;border-bottom:1px solid #ddd;text-align:right;vertical-align:top}
table th:first-child,table td.l{text-align:left}
tr.group th{text-align:left;font-style:italic;background:#f4f4f4}
caption{caption-side:top;text-align:left;font-weight:600;margin-bottom:4px}
.notes{font-size:12px;color:#555}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;max-width:900px;margin:0}
figure{display:inline-block;margin:0 1em 1em 0;max-width:560px;vertical-align:top}figure img{max-width:560px}
figcaption{font-size:12px;color:#444}
td.better{color:#18794e}td.worse{color:#b42318}
.pass{color:#18794e}.fail{color:#b42318;font-weight:600}.skip{color:#6b7280}
#filters select{margin-right:1em}
"""

_JS = """
(function(){
  window.addEventListener('error', function(e){document.body.setAttribute('data-js-error', String(e.message));});
  var data = JSON.parse(document.getElementById('sample-data').textContent);
  var f = {system: document.getElementById('f-system'), task: document.getElementById('f-task'),
           seed: document.getElementById('f-seed'), valid: document.getElementById('f-valid'),
           kind: document.getElementById('f-kind'), why: document.getElementById('f-why')};
  function fill(sel, values){
    values.forEach(function(v){var o=document.createElement('option');o.value=String(v);o.textContent=String(v);sel.appendChild(o);});
  }
  function uniq(key){var s=[];data.forEach(function(r){if(s.indexOf(r[key])<0)s.push(r[key]);});return s;}
  fill(f.system, uniq('system')); fill(f.task, uniq('task')); fill(f.seed, uniq('seed'));
  var kinds=[]; data.forEach(function(r){(r.kinds||[]).forEach(function(k){if(kinds.indexOf(k)<0)kinds.push(k);});});
  fill(f.kind, kinds.sort());
  var body = document.getElementById('sample-body'), count = document.getElementById('sample-count');
  function cell(tr, text, cls){var td=document.createElement('td');if(cls)td.className=cls;td.textContent=text;tr.appendChild(td);return td;}
  function render(){
    while(body.firstChild) body.removeChild(body.firstChild);
    var n = 0;
    data.forEach(function(r){
      if(f.system.value && r.system !== f.system.value) return;
      if(f.task.value && r.task !== f.task.value) return;
      if(f.seed.value && String(r.seed) !== f.seed.value) return;
      if(f.valid.value === 'valid' && !r.valid) return;
      if(f.valid.value === 'invalid' && r.valid) return;
      if(f.kind.value && (r.kinds||[]).indexOf(f.kind.value) < 0) return;
      var needle = f.why.value.toLowerCase();
      if(needle && ([r.why, r.error].join(' ').toLowerCase().indexOf(needle) < 0)) return;
      var tr = document.createElement('tr'); tr.className = 'sample ' + (r.valid ? 'valid' : 'invalid');
      cell(tr, r.system, 'l'); cell(tr, r.task, 'l'); cell(tr, String(r.seed)); cell(tr, String(r.index));
      cell(tr, r.status, 'l'); cell(tr, r.tsr === null || r.tsr === undefined ? '\\u2013' : (r.tsr ? 'yes' : 'no'));
      cell(tr, [r.why, r.error].filter(Boolean).join('; '), 'l');
      var td = cell(tr, '', 'l'); var pre = document.createElement('pre'); pre.textContent = r.text; td.appendChild(pre);
      body.appendChild(tr); n++;
    });
    count.textContent = n + ' of ' + data.length + ' samples shown';
  }
  [f.system, f.task, f.seed, f.valid, f.kind].forEach(function(s){s.addEventListener('change', render);});
  f.why.addEventListener('input', render);
  render();
  document.body.setAttribute('data-ready', '1');
})();
"""


def render_report_html(run_dir: Path | str, *, plots: dict[str, list[Path]] | None = None) -> str:
    """The whole report page as one string (see module docstring)."""
    from reports.aggregate import failed_cells, read_manifest
    from reports.run_report import manifest_facts
    from reports.table import tables_for_run

    manifest = read_manifest(run_dir)
    suite = manifest.get("suite") or {}
    title = f"Run report: {suite.get('name') or Path(run_dir).name}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<ul>"
        + "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in manifest_facts(manifest, run_dir))
        + "</ul>",
    ]
    expectations = [e for e in manifest.get("expectations") or [] if isinstance(e, dict)]
    if expectations:
        parts.append('<h2>Expectations</h2><ul id="expectations">')
        for e in expectations:
            cls, word = (
                ("skip", "SKIP")
                if e.get("skipped")
                else ("pass", "PASS")
                if e.get("passed")
                else ("fail", "FAIL")
            )
            parts.append(
                f'<li><span class="{cls}">{word}</span> <code>{esc(e.get("text", ""))}</code>: {esc(e.get("detail", ""))}</li>'
            )
        parts.append("</ul>")
    parts.append("<h2>Tables</h2>")
    for t in tables_for_run(run_dir):
        parts.append(render_table_html(t))
        if t.reproduces:
            from reports.reproduction import build_reproduction

            parts.append(render_reproduction_html(build_reproduction(t, t.reproduces)))
    if plots:
        parts.append('<h2>Plots</h2><div id="plots">')
        parts += [
            _img(name, files[0]) for name, files in plots.items() if files and files[0].suffix == ".png"
        ]
        parts.append("</div>")
    failed = failed_cells(run_dir)
    parts.append(f"<h2>Failed cells ({len(failed)})</h2>")
    if failed:
        parts.append(
            '<table class="failed"><thead><tr><th>system</th><th>task</th><th>seed</th><th>status</th><th>reason</th></tr></thead><tbody>'
        )
        for f in failed:
            parts.append(
                f'<tr class="failed-cell"><td class="l">{esc(f["system"])}</td><td class="l">{esc(f["task"])}</td>'
                f'<td>{esc(f["seed"])}</td><td class="l">{esc(f["status"])}</td><td class="l"><pre>{esc(f["error"])}</pre></td></tr>'
            )
        parts.append("</tbody></table>")
    else:
        parts.append("<p>None.</p>")
    rows, left_out = sample_rows(run_dir)
    parts.append("<h2>Samples</h2>")
    if left_out:
        parts.append(
            f'<p class="notes">{left_out} sample(s) not embedded (at most {MAX_SAMPLES_PER_CELL} per cell, '
            f"{MAX_SAMPLES_TOTAL} in all); every sample is in the cell's samples.jsonl.</p>"
        )
    parts.append(
        '<div id="filters">system <select id="f-system"><option value="">all</option></select>'
        'task <select id="f-task"><option value="">all</option></select>'
        'seed <select id="f-seed"><option value="">all</option></select>'
        'samples <select id="f-valid"><option value="">all</option><option value="valid">valid</option>'
        '<option value="invalid">invalid</option></select>'
        'failure <select id="f-kind"><option value="">any</option></select>'
        'why contains <input id="f-why" type="search" placeholder="e.g. does not match">'
        ' <span id="sample-count"></span></div>'
        '<table class="samples"><thead><tr><th>system</th><th>task</th><th>seed</th><th>#</th><th>status</th>'
        '<th>TSR</th><th>why</th><th>text</th></tr></thead><tbody id="sample-body"></tbody></table>'
    )
    parts.append(f'<script type="application/json" id="sample-data">{_json_for_script(rows)}</script>')
    parts.append(
        "<h2>Manifest</h2><details><summary>manifest.json</summary><pre>"
        f"{esc(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False))}</pre></details>"
    )
    parts.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(parts) + "\n"


def write_report_html(run_dir: Path | str, *, with_plots: bool = True) -> Path:
    """Write RUN_DIR/report.html (drawing the plots first when asked) and return its path."""
    plots = None
    if with_plots:
        from reports.plots import write_plots

        plots = write_plots(run_dir)
    path = Path(run_dir) / "report.html"
    atomic_write_text(path, render_report_html(run_dir, plots=plots), errors="replace")  # lone surrogates
    return path
