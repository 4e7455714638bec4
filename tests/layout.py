"""What the browser tests measure of a rendered page's layout (tests/test_layout.py,
tests/test_browser.py): listings whose lines wrapped, tables cut at the right, in JavaScript run in
the page, so what is measured is what Chromium drew."""

from __future__ import annotations

#: Every visible <pre> under `root`: its lines as drawn. A line of the text (between two "\n") whose
#: pieces lie on more than one line box wrapped; a listing wider than its box must scroll, and
#: its box must end inside the content (`content`: the selector of the page's content column).
LISTINGS_JS = r"""([root, content]) => {
  const found = {listings: 0, lines: 0, scrolling: 0, problems: []};
  for (const pre of root.querySelectorAll('pre')) {
    if (!pre.getClientRects().length) continue;            // not drawn (a closed tab, hidden)
    const cs = getComputedStyle(pre);
    const lineHeight = parseFloat(cs.lineHeight) || 1.2 * parseFloat(cs.fontSize);
    const tops = new Map();                                 // line number -> tops of its pieces
    let line = 0;
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      let at = 0;
      node.textContent.split('\n').forEach((piece, i) => {
        if (i > 0) line += 1;
        if (piece.length) {
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + piece.length);
          for (const r of range.getClientRects()) {
            if (r.width > 0) {
              if (!tops.has(line)) tops.set(line, []);
              tops.get(line).push(r.top);
            }
          }
        }
        at += piece.length + 1;
      });
    }
    if (!tops.size) continue;
    found.listings += 1;
    found.lines += tops.size;
    const text = pre.textContent.split('\n');
    for (const [n, ts] of tops) {
      if (Math.max(...ts) - Math.min(...ts) > lineHeight / 2) {
        found.problems.push(`wrapped (white-space: ${cs.whiteSpace}, word-break: ` +
                            `${cs.wordBreak}): ${JSON.stringify(text[n].trim().slice(0, 90))}`);
      }
    }
    const box = pre.closest(content);
    const wide = pre.scrollWidth > pre.clientWidth + 1;
    if (wide && ['auto', 'scroll'].includes(cs.overflowX)) found.scrolling += 1;
    if (wide && !['auto', 'scroll'].includes(cs.overflowX)) {
      found.problems.push(`wider than its box and not scrolling (overflow-x: ${cs.overflowX}): ` +
                          JSON.stringify(text[0].trim().slice(0, 90)));
    }
    if (box && pre.getBoundingClientRect().right > box.getBoundingClientRect().right + 1) {
      found.problems.push(`runs past the content's right edge: ` +
                          JSON.stringify(text[0].trim().slice(0, 90)));
    }
  }
  return found;
}"""

#: Every visible <table> under `root`: it fits the content column, or the nearest box around it
#: that scrolls sideways does (and ends inside the column).
TABLES_JS = r"""([root, content]) => {
  const found = {tables: 0, scrolling: 0, problems: []};
  for (const table of root.querySelectorAll('table')) {
    if (!table.getClientRects().length) continue;
    const column = table.closest(content);
    if (!column) continue;
    found.tables += 1;
    const right = column.getBoundingClientRect().right + 1;
    let box = table.parentElement, scroller = null;
    for (; box && box !== column; box = box.parentElement) {
      if (['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) { scroller = box; break; }
    }
    const head = (table.querySelector('th, td') || table).textContent.trim().slice(0, 40);
    const wide = table.getBoundingClientRect().right > right;
    if (scroller) {
      if (scroller.scrollWidth > scroller.clientWidth + 1) found.scrolling += 1;
      if (scroller.getBoundingClientRect().right > right) {
        found.problems.push(`its scrolling box runs past the content's right edge: ${head}`);
      }
    } else if (wide || table.scrollWidth > table.clientWidth + 1) {
      found.problems.push(`cut at the right (${Math.round(table.getBoundingClientRect().right)}` +
                          ` px, the column ends at ${Math.round(right)} px): ${head}`);
    }
  }
  return found;
}"""
