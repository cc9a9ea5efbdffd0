"""A report's HTML as notebook front ends show it, measured in headless Chromium.

Each host is its real stylesheets (tests/jupyter_css/, vendored from the jupyterlab and nbconvert
wheels) around the page structure it puts an HTML output in. A script in the page reads, after
layout, what a person sees of every table cell and preformatted block of the report: computed
alignment, wrapping and font, whether the font really is fixed-width, and every word that the
layout split over two lines. `--dump-dom` prints the page after it ran; the figures come back in
an element of their own.
"""

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CSS = Path(__file__).parent / "jupyter_css"
LAB = "jupyterlab-4.6.6"
NBCONVERT = "nbconvert-7.17.2"
WIDTHS = (1100, 460)  # px: a wide notebook, and a narrow one (a side panel, a split view) where messages wrap

# The live JupyterLab 4 notebook: an HTML output sits in a RenderedHTMLCommon widget of an output area.
_LAB_OUTPUT = ('<div class="lm-Widget jp-Notebook jp-NotebookPanel-notebook" style="width:{width}px">'
               '<div class="lm-Widget jp-Cell jp-CodeCell jp-Notebook-cell"><div class="lm-Widget jp-Cell-outputWrapper">'
               '<div class="lm-Widget jp-OutputArea jp-Cell-outputArea"><div class="lm-Widget lm-Panel jp-OutputArea-child">'
               '<div class="lm-Widget jp-OutputPrompt jp-OutputArea-prompt"></div>'
               '<div class="lm-Widget jp-RenderedHTMLCommon jp-RenderedHTML jp-OutputArea-output" data-mime-type="text/html" '
               'data-probe-root="{width}">{report}</div></div></div></div></div></div>')
# nbconvert's lab template (templates/lab/base.html.j2).
_NBCONVERT_OUTPUT = ('<main style="width:{width}px"><div class="jp-Cell jp-CodeCell jp-Notebook-cell">'
                     '<div class="jp-Cell-outputWrapper"><div class="jp-Collapser jp-OutputCollapser jp-Cell-outputCollapser"></div>'
                     '<div class="jp-OutputArea jp-Cell-outputArea"><div class="jp-OutputArea-child">'
                     '<div class="jp-OutputPrompt jp-OutputArea-prompt"></div>'
                     '<div class="jp-RenderedHTMLCommon jp-RenderedHTML jp-OutputArea-output" data-mime-type="text/html" '
                     'data-probe-root="{width}">{report}</div></div></div></div></div></main>')
# The classic Notebook (nbconvert's classic template, templates/classic/base.html.j2).
_CLASSIC_OUTPUT = ('<div id="notebook" class="border-box-sizing"><div class="container" id="notebook-container" style="width:{width}px">'
                   '<div class="cell border-box-sizing code_cell rendered"><div class="output_wrapper"><div class="output">'
                   '<div class="output_area"><div class="prompt"></div>'
                   '<div class="output_html rendered_html output_subarea" data-probe-root="{width}">{report}</div>'
                   '</div></div></div></div></div></div>')
# What other front ends (VS Code's and Colab's renderers, a user's custom.css) may do to any table
# or preformatted text, as strongly as a stylesheet can say it.
HOSTILE_CSS = """
td, th, tr, table, div, p { text-align: right !important; vertical-align: middle !important; font-family: serif !important; }
pre, code { word-break: break-all !important; overflow-wrap: anywhere !important; white-space: pre !important;
            font-family: serif !important; margin: 2em !important; }
table { margin-left: auto !important; margin-right: auto !important; table-layout: fixed !important; }
"""


def _css(*names: str) -> str:
    return "\n".join((CSS / name).read_text() for name in names)


HOSTS = {
    "JupyterLab light": (lambda: _css(f"{LAB}.css", f"{LAB}-theme-light.css"),
                         'class="jp-ThemedContainer" data-jp-theme-light="true"', _LAB_OUTPUT),
    "JupyterLab dark": (lambda: _css(f"{LAB}.css", f"{LAB}-theme-dark.css"),
                        'class="jp-ThemedContainer" data-jp-theme-light="false"', _LAB_OUTPUT),
    "nbconvert lab light": (lambda: _css(f"{NBCONVERT}-lab-index.css", f"{NBCONVERT}-lab-theme-light.css",
                                         f"{NBCONVERT}-lab-inline.css"),
                            'class="jp-Notebook" data-jp-theme-light="true"', _NBCONVERT_OUTPUT),
    "nbconvert lab dark": (lambda: _css(f"{NBCONVERT}-lab-index.css", f"{NBCONVERT}-lab-theme-dark.css",
                                        f"{NBCONVERT}-lab-inline.css"),
                           'class="jp-Notebook" data-jp-theme-light="false"', _NBCONVERT_OUTPUT),
    "classic Notebook": (lambda: _css(f"{NBCONVERT}-classic-style.css", f"{NBCONVERT}-classic-inline.css"),
                         "", _CLASSIC_OUTPUT),
    "hostile stylesheet": (lambda: HOSTILE_CSS, "", '<div style="width:{width}px" data-probe-root="{width}">{report}</div>'),
}

# Runs after the report is laid out. For every root (one per width): each cell's text and computed
# style; each <pre>'s computed wrapping and font, whether that font is fixed-width (ten i's as wide
# as ten W's), its line count and overflow; every run of letters, digits or underscores that
# the layout put on two lines; and the tables' left edges against the output's.
_PROBE = r"""
(function () {
  function fixedWidth(el) {
    var s = document.createElement('span');
    s.textContent = 'iiiiiiiiii';
    el.appendChild(s);
    var narrow = s.getBoundingClientRect().width;
    s.textContent = 'WWWWWWWWWW';
    var wide = s.getBoundingClientRect().width;
    el.removeChild(s);
    return Math.abs(narrow - wide) < 0.5;
  }
  function brokenWords(root) {
    var found = [], walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT), node;
    while ((node = walker.nextNode())) {
      var re = /[\p{L}\p{N}_]+/gu, m;
      while ((m = re.exec(node.data))) {
        var range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        var tops = [];
        for (var r of range.getClientRects()) {
          if (r.width > 0 && !tops.some(function (t) { return Math.abs(t - r.top) < 2; })) tops.push(r.top);
        }
        if (tops.length > 1) found.push(m[0]);
      }
    }
    return found;
  }
  var out = [];
  for (var root of document.querySelectorAll('[data-probe-root]')) {
    var box = root.getBoundingClientRect();
    var cells = [], blocks = [], tables = [];
    for (var c of root.querySelectorAll('td, th')) {
      var cs = getComputedStyle(c);
      cells.push({tag: c.tagName.toLowerCase(), text: c.textContent.trim(), align: cs.textAlign,
                  font: cs.fontFamily, fixed: fixedWidth(c), className: c.className});
    }
    for (var p of root.querySelectorAll('pre')) {
      var ps = getComputedStyle(p);
      var lineHeight = parseFloat(ps.lineHeight) || parseFloat(ps.fontSize) * 1.2;
      blocks.push({text: p.textContent, whiteSpace: ps.whiteSpace, wordBreak: ps.wordBreak,
                   overflowWrap: ps.overflowWrap, font: ps.fontFamily, fixed: fixedWidth(p),
                   align: ps.textAlign, inCell: !!p.closest('td'), className: p.className,
                   lines: Math.round(p.clientHeight / lineHeight),
                   overflows: p.scrollWidth > p.clientWidth + 1});
    }
    var rs = getComputedStyle(root), inner = box.left + parseFloat(rs.paddingLeft) + parseFloat(rs.borderLeftWidth);
    for (var t of root.querySelectorAll("table")) tables.push(t.getBoundingClientRect().left - inner);
    out.push({width: Number(root.getAttribute('data-probe-root')), cells: cells, blocks: blocks,
              tables: tables, broken: brokenWords(root), text: root.innerText});
  }
  var sink = document.createElement('pre');
  sink.id = 'probe-result';
  sink.textContent = JSON.stringify(out);
  document.body.appendChild(sink);
})();
"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def page(report: str, host: str) -> str:
    css, body, output = HOSTS[host]
    roots = "".join(output.format(width=w, report=report) for w in WIDTHS)
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{css()}</style></head>'
            f"<body {body}>{roots}<script>{_PROBE}</script></body></html>")


def measure(report: str, host: str, browser: str) -> list[dict]:
    """What the probe read of `report` shown by `host`: one dict per width of WIDTHS."""
    with tempfile.TemporaryDirectory(prefix="graders-chromium-") as tmp:
        path = Path(tmp) / "page.html"
        path.write_text(page(report, host))
        # A profile of its own, and nothing that reaches the network or starts a GPU process.
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   "--disable-dev-shm-usage", f"--user-data-dir={tmp}/profile", "--window-size=1400,3000",
                   "--dump-dom", path.as_uri()]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, HOME=tmp))
    found = re.search(r'<pre id="probe-result">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"Chromium printed no figures (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(html.unescape(found.group(1)))
