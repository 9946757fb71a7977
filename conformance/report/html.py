"""report.html: one static page, no network. An op x dtype grid per mode, coloured by status,
filterable by op name and status; a failing cell shows its error and repro (hover), and every
case of the cell with its snippet (click)."""

import html
import json
from typing import Any

from ..verdicts.status import PROBLEMS
from .console import mode_rows
from .schema import interruption

# Each status's (background, text) colours: the text reads at a contrast of at least 4.5:1 (WCAG AA),
# dark on the light backgrounds and white on the dark ones.
COLOURS = {"pass": ("#2e7d32", "#ffffff"), "xfail": ("#c8e6c9", "#1b4d20"), "skip": ("#d0d0d0", "#222222"),
           "unsupported": ("#e6e6e6", "#444444"), "unsupported-dtype": ("#e6e6e6", "#444444"),
           "xpass": ("#e0b63a", "#222222"), "fail": ("#c62828", "#ffffff"), "timeout": ("#8e44ad", "#ffffff"),
           "crashed": ("#222222", "#ffffff")}

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; }}
#grid td.c {{ width: 5.5em; text-align: center; cursor: pointer; font-size: 12px; }}
#grid td.op {{ font-family: monospace; }} pre {{ background: #f5f5f5; padding: .6em; white-space: pre-wrap; }}
.legend span {{ display: inline-block; padding: 1px 6px; margin-right: 4px; }}
#controls {{ margin: 1em 0; }} #controls > * {{ margin-right: 1em; }}
.interrupted {{ background: #fff3cd; border-left: 4px solid #b8860b; padding: .4em .8em; }}
</style></head><body>
<h1>{title}</h1>
<p>{subtitle}</p>
{interrupted}
{modes}
{checks}
<div id="controls">
 <label>mode <select id="mode"></select></label>
 <label>op filter (regex) <input id="filter" size="30"></label>
 <label><input type="checkbox" id="problems"> problem cells only</label>
 <span class="legend">{legend}</span>
</div>
<table id="grid"></table>
<div id="detail"></div>
<script type="application/json" id="data">{data}</script>
<script>
const report = JSON.parse(document.getElementById("data").textContent);
const colours = {colours};
const order = Object.keys(colours);
const problem = s => {problems}.includes(s);
const cells = {{}};  // mode -> op -> dtype -> [cases]
const dtypes = [];
for (const c of report.cases) {{
  ((cells[c.mode] ??= {{}})[c.op] ??= {{}});
  (cells[c.mode][c.op][c.dtype] ??= []).push(c);
  if (!dtypes.includes(c.dtype)) dtypes.push(c.dtype);
}}
const modeSelect = document.getElementById("mode");
for (const m of Object.keys(report.summary)) modeSelect.add(new Option(m, m));  // in the suite's mode order
const worst = cs => cs.map(c => c.status).reduce((a, b) => order.indexOf(b) > order.indexOf(a) ? b : a);
const fmt = v => typeof v === "number" ? v.toPrecision(3) : v;
const text = s => String(s ?? "").replace(/[&<>"]/g, ch => ({{"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}})[ch]);
function draw() {{
  const mode = modeSelect.value, byOp = cells[mode] ?? {{}};
  let re; try {{ re = new RegExp(document.getElementById("filter").value); }} catch (e) {{ re = /.*/; }}
  const onlyProblems = document.getElementById("problems").checked;
  let rows = "<tr><th>op</th>" + dtypes.map(d => `<th>${{d}}</th>`).join("") + "</tr>";
  for (const op of Object.keys(byOp).sort()) {{
    if (!re.test(op)) continue;
    const statuses = dtypes.map(d => byOp[op][d] ? worst(byOp[op][d]) : null);
    if (onlyProblems && !statuses.some(problem)) continue;
    rows += `<tr><td class="op">${{text(op)}}</td>` + dtypes.map((d, i) => {{
      const s = statuses[i];
      if (!s) return "<td></td>";
      const bad = byOp[op][d].find(c => problem(c.status));
      const tip = bad ? `${{bad.detail}}\\n${{bad.repro}}` : s;
      return `<td class="c" style="background:${{colours[s][0]}};color:${{colours[s][1]}}" title="${{text(tip)}}" data-op="${{text(op)}}" data-dtype="${{d}}">${{s}}</td>`;
    }}).join("") + "</tr>";
  }}
  document.getElementById("grid").innerHTML = rows;
}}
document.getElementById("grid").addEventListener("click", e => {{
  const td = e.target.closest("td.c"); if (!td) return;
  const cs = cells[modeSelect.value][td.dataset.op][td.dataset.dtype];
  document.getElementById("detail").innerHTML = `<h3>${{text(td.dataset.op)}} ${{td.dataset.dtype}} ${{modeSelect.value}}</h3>` +
    cs.map(c => `<p><b>sample ${{c.sample}}: ${{c.status}}</b> ${{text(c.detail)}} ${{c.manifest_reason ? "(manifest: " + text(c.manifest_reason) + ")" : ""}}` +
      (c.max_abs != null ? ` max abs ${{fmt(c.max_abs)}}, max rel ${{fmt(c.max_rel)}}, mismatches ${{c.mismatches}}` : "") +
      `<br><code>${{text(c.repro)}}</code></p>` + (c.snippet ? `<pre>${{text(c.snippet)}}</pre>` : "")).join("");
}});
for (const id of ["mode", "filter", "problems"]) document.getElementById(id).addEventListener("input", draw);
draw();
</script></body></html>
"""


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(report: dict[str, Any]) -> str:
    backend = report["backend"]
    title = f"torchplug check {backend['name']}"
    subtitle = (f"{backend['device']} ({backend['mode']}), torch {report['versions']['torch']}, torchplug "
                f"{report['versions']['torchplug']}, {report['selection']['tier']} tier, {report['wall_s']:.1f} s, "
                f"{report['created']}; {backend['codegen']}; ISA: {backend['isa']}")
    checks = ""
    if report["runtime_checks"]:
        checks = "<h2>Runtime checks</h2>" + _table(("check", "result", "detail"), [
            (c["name"], c["status"], c["detail"]) for c in report["runtime_checks"]])
    legend = "".join(f'<span style="background:{background};color:{text}">{status}</span>'
                     for status, (background, text) in COLOURS.items())
    return PAGE.format(
        title=html.escape(title), subtitle=html.escape(subtitle),
        modes="<h2>Pass rate per mode</h2>" + _table(("mode", "pass rate", "judged", "statuses"), mode_rows(report)),
        checks=checks, legend=legend,
        interrupted=f'<p class="interrupted"><b>Interrupted</b> {html.escape(interruption(report))}.</p>'
        if report.get("interrupted") else "", colours=json.dumps(COLOURS), problems=json.dumps(PROBLEMS),
        data=json.dumps(report, allow_nan=False).replace("</", "<\\/"),
    )
