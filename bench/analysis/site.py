"""`bench site`: every committed leaderboard as a static HTML site people can browse.

One page per leaderboard (its verdict badge and row from the README, its key figure, its
findings page where it has one, then its table, tests and figures, all as committed, with the
long conventions and the tuning runs collapsed) and an index: a grid of boards (claim, verdict
badge, key figure) above the README's verdict table. Tables sort by any column on a click.
Nothing is recomputed: the pages render the committed markdown (markdown-it) into one Jinja2
template, so the site says exactly what the tables say. Figures are linked, not copied,
relative to the output directory: the committed `site/` shows them when the repository root is
served (`python -m http.server`, GitHub Pages).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markdown_it import MarkdownIt

from ..core.errors import ConfigError
from ..core.files import write_atomic

VERDICTS = "## What the leaderboards show"


BOARD_FILES = ("README.md", "leaderboard.md")
REPORT_FILES = ("scorecard.md", "smoke.md", "README.md", "compare.md")
"""a suite's or a compare's directory: its report, then (without compare.md) its table"""


@dataclass
class Board:
    name: str
    directory: Path
    """leaderboards/<name>: leaderboard.md, figures, and README.md (findings) where written"""
    verdict: list[str] | None = None
    """the README's verdict row for this leaderboard: [claim, verdict, link]"""
    files: tuple[str, ...] = BOARD_FILES
    """the markdown the page renders, in order, where present"""

    def figure(self) -> str | None:
        """The board's key figure: the first image its findings page shows, else its table's."""
        for name in self.files:
            path = self.directory / name
            found = IMAGE.search(path.read_text()) if path.is_file() else None
            if found:
                return found.group(1)
        return None


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
# a verdict's badge, from the first words of the README's verdict cell: (words, class, label)
BADGES = [
    (("agrees",), "agrees", "agrees"),
    (("partly",), "partly", "partly"),
    (("differs", "disagrees"), "differs", "differs"),
    (("not supported", "not significant", "leans"), "ns", "not significant"),
]


def badge(verdict: str) -> tuple[str, str]:
    """(css class, label) of a verdict cell: its leading bold words decide; without them, its
    bold verdicts of the parts (one kind: that kind; several: partly); a row without a claim
    (descriptive) gets none of the four."""
    def kind(words: str) -> tuple[str, str] | None:
        words = words.strip().lower()
        return next(((css, label) for starts, css, label in BADGES if words.startswith(starts)),
                    None)

    lead = re.match(r"\s*\*\*([^*]+)\*\*", verdict)
    if lead and kind(lead.group(1)):
        return kind(lead.group(1))
    kinds = {k for k in map(kind, re.findall(r"\*\*([^*]+)\*\*", verdict)) if k}
    if len(kinds) > 1:
        return "partly", "partly"
    return kinds.pop() if kinds else ("descriptive", "descriptive")


def _collapsed(text: str) -> list[tuple[str, str | None]]:
    """A leaderboard.md as (markdown, summary) segments: its long convention paragraphs and its
    tuning runs (the note and the table after it) under `summary` (shown collapsed), the rest
    (tables, notes in bold, figures, headings) with None."""
    segments: list[tuple[str, str | None]] = []
    blocks = text.split("\n\n")
    i = 0
    while i < len(blocks):
        block = blocks[i]
        if block.startswith("Learning rates were chosen per row") or block.startswith(
                "Each architecture is shown at its best learning rate"):
            tail = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].startswith("|") else ""
            segments.append((f"{block}\n\n{tail}", "Tuning runs"))
            i += 2 if tail else 1
            continue
        plain = not block.startswith(("|", "#", "!", "**", "- ", "*"))
        segments.append((block, "Conventions" if plain and len(block) > 300 else None))
        i += 1
    return segments


def find_boards(root: Path) -> list[Board]:
    """The committed leaderboards: each spec `leaderboards/NAME.yaml` whose directory holds a
    rendered `leaderboard.md` or a findings `README.md` (a sweep still running), in name order."""
    boards = [Board(spec.stem, spec.with_suffix("")) for spec in
              sorted((root / "leaderboards").glob("*.yaml"))
              if any((spec.with_suffix("") / n).is_file() for n in ("leaderboard.md", "README.md"))]
    if not boards:
        raise ConfigError(f"--root: {root} holds no committed leaderboard "
                          "(leaderboards/NAME.yaml with NAME/leaderboard.md or NAME/README.md)")
    return boards


def find_reports(root: Path, extra: list[Path] | tuple[Path, ...] = ()) -> list[Board]:
    """The suite's committed reports (leaderboards/suite/TIER/ with smoke.md or scorecard.md),
    then each `extra` directory (a user's compare or suite output): one page each."""
    tiers = sorted(p for p in (root / "leaderboards" / "suite").glob("*/")
                   if any((p / n).is_file() for n in ("smoke.md", "scorecard.md")))
    out = [Board(f"suite-{p.name}", p, files=REPORT_FILES) for p in tiers]
    for directory in extra:
        if not any((directory / n).is_file() for n in (*REPORT_FILES, "leaderboard.md")):
            raise ConfigError(f"--dir: {directory} holds no report (scorecard.md, smoke.md, "
                              "compare.md or leaderboard.md)")
        files = REPORT_FILES if (directory / "compare.md").is_file() or not (
            directory / "leaderboard.md").is_file() else (*REPORT_FILES, "leaderboard.md")
        out.append(Board(directory.resolve().name, directory, files=files))
    return out


def suite_cells(directory: Path) -> list[Path]:
    """A suite directory's cells: its subdirectories with a table."""
    return sorted(p for p in directory.glob("*/")
                  if any((p / n).is_file() for n in ("compare.md", "leaderboard.md")))


def verdict_section(readme: str) -> tuple[str, list[str], list[list[str]]]:
    """The README's verdict section: (the text above its table, the table's header, its rows as
    cells)."""
    if VERDICTS not in readme:
        raise ConfigError(f"README.md: no '{VERDICTS}' section to take the verdicts from")
    section = readme.split(VERDICTS, 1)[1].split("\n## ", 1)[0]
    lines = section.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ConfigError(f"README.md: the '{VERDICTS}' section has no table (rows starting "
                          "'|') to take the verdicts from")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = [_cells(line) for line in lines[start:end]]
    return "\n".join(lines[:start]).strip(), rows[0], rows[2:]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


class Renderer:
    """Markdown to HTML for one page: links to a leaderboard's markdown become its page, links
    and images to other files become paths relative to the site directory."""

    def __init__(self, root: Path, out: Path, pages: dict[Path, str]):
        self.root, self.out, self.pages = root.resolve(), out.resolve(), pages
        self.md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def __call__(self, text: str, source_dir: Path) -> str:
        tokens = self.md.parse(text)
        for token in tokens:
            for child in token.children or []:
                for attr in ("href", "src"):
                    target = child.attrGet(attr)
                    if isinstance(target, str):
                        child.attrSet(attr, self.target(target, source_dir.resolve()))
        html = self.md.renderer.render(tokens, self.md.options, {})
        return html.replace("<table>", '<table class="sortable">')

    def inline(self, text: str, source_dir: Path) -> str:
        """One line of markdown (a table cell) as HTML without its paragraph."""
        return self(text, source_dir).strip().removeprefix("<p>").removesuffix("</p>")

    def target(self, link: str, source_dir: Path) -> str:
        if re.match(r"^[a-z]+:|^#|^/", link):  # a URL, an anchor, an absolute path
            return link
        path, _, anchor = link.partition("#")
        resolved = (source_dir / path).resolve()
        if resolved in self.pages:
            return self.pages[resolved] + (f"#{anchor}" if anchor else "")
        if resolved.is_dir() and resolved / "README.md" in self.pages:
            return self.pages[resolved / "README.md"]
        return os.path.relpath(resolved, self.out) + (f"#{anchor}" if anchor else "")


def build_site(root: Path | str = ".", out: Path | str = "site",
               links_from: Path | str | None = None,
               extra: list[Path] | tuple[Path, ...] = ()) -> list[Path]:
    """Write the site for the leaderboards under `root` into `out`, with a page for each suite
    report and each `extra` directory (a compare's or a suite's output); return the pages
    written. Links are relative to `links_from` (default `out`): where the pages are served."""
    root, out = Path(root), Path(out)
    blocked = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise ConfigError(f"--out: {blocked} is a file; the site is a folder of pages (give a "
                          "folder, new or one the site was written to)")
    boards = find_boards(root) + find_reports(root, extra)
    readme = root / "README.md"
    if not readme.is_file():
        raise ConfigError(f"--root: {root} has no README.md (the verdict table)")
    intro, header, rows = verdict_section(readme.read_text())
    pages: dict[Path, str] = {}
    for b in boards:
        for name in b.files:
            pages[(b.directory / name).resolve()] = f"{b.name}.html"
    render = Renderer(root, Path(links_from or out), pages)
    for row in rows:
        for b in boards:
            if f"(leaderboards/{b.name}/" in row[-1]:
                b.verdict = row
    out.mkdir(parents=True, exist_ok=True)
    template = _environment().from_string(TEMPLATE)
    written = []
    index_table = "\n".join(["| " + " | ".join(header) + " |",
                             "|" + "---|" * len(header),
                             *("| " + " | ".join(row) + " |" for row in rows)])
    cards = [{"name": b.name, "claim": render.inline(b.verdict[0], root) if b.verdict else "",
              "badge": badge(b.verdict[1]) if b.verdict else ("descriptive", "no verdict yet"),
              "figure": render.target(figure, b.directory.resolve()) if figure else None}
             for b in boards for figure in [b.figure()]]
    body = render(f"{intro}\n\n{index_table}\n", root)
    written.append(write_atomic(out / "index.html", template.render(
        title="emergence-bench leaderboards", body=body, boards=boards, here="index",
        cards=cards, card=None)))
    for b, card in zip(boards, cards):
        written.append(write_atomic(out / f"{b.name}.html", template.render(
            title=b.name, body=_board_body(b, card, header, render, root), boards=boards,
            here=b.name, cards=[], card=card)))
    return written


def _board_body(b: Board, card: dict[str, Any], header: list[str], render: Renderer,
                root: Path) -> str:
    """A board's page: its README verdict row, its key figure, its files (long sections
    collapsed) and, for a suite or a compare, each cell's table collapsed."""
    parts = []
    if b.verdict:
        parts.append(render("**Verdict** (the README's row for this leaderboard):\n\n"
                            + "| " + " | ".join(header) + " |\n|" + "---|" * len(header)
                            + "\n| " + " | ".join(b.verdict) + " |\n", root))
    if card["figure"]:
        parts.append(f'<img class="key" src="{card["figure"]}" alt="key figure">')
    for name in b.files:
        path = b.directory / name
        if not path.is_file():
            continue
        parts.append("\n".join(
            render(text, b.directory) if summary is None else
            f"<details><summary>{summary}</summary>\n{render(text, b.directory)}</details>"
            for text, summary in _collapsed(path.read_text())))
    if b.files == REPORT_FILES or "leaderboard.md" not in b.files:
        for cell in suite_cells(b.directory):  # a suite's cells, collapsed
            table = cell / ("compare.md" if (cell / "compare.md").is_file()
                            else "leaderboard.md")
            parts.append(f"<details><summary>cell {cell.name}</summary>\n"
                         f"{render(table.read_text(), cell)}</details>")
    return "\n<hr>\n".join(parts)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 1em; }
nav a { margin-right: 1em; } nav a.here { font-weight: bold; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
img { max-width: 100%; display: block; margin: 1em 0; }
code { background: #f6f6f6; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr));
        gap: 1em; margin: 1em 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.8em; }
.card h3 { margin: 0 0 0.3em; } .card p { margin: 0.3em 0; font-size: 13px; }
.card img { max-height: 180px; object-fit: contain; margin: 0.5em auto 0; }
.badge { display: inline-block; border-radius: 4px; padding: 1px 8px; font-size: 12px;
         font-weight: bold; color: #fff; }
.badge.agrees { background: #2e7d32; } .badge.partly { background: #f9a825; color: #222; }
.badge.differs { background: #c62828; } .badge.ns { background: #757575; }
.badge.descriptive { background: #1565c0; }
img.key { max-height: 480px; }
details { margin: 0.5em 0; } summary { cursor: pointer; color: #555; }
</style>
</head>
<body>
<nav><a href="index.html"{% if here == "index" %} class="here"{% endif %}>verdicts</a>
{%- for b in boards %}
<a href="{{ b.name }}.html"{% if here == b.name %} class="here"{% endif %}>{{ b.name }}</a>
{%- endfor %}</nav>
<main>
{%- if card %}
<h1>{{ card.name }} <span class="badge {{ card.badge[0] }}">{{ card.badge[1] }}</span></h1>
<p>{{ card.claim | safe }}</p>
{%- endif %}
{%- if cards %}
<h1>emergence-bench leaderboards</h1>
<div class="grid">
{%- for c in cards %}
<section class="card"><h3><a href="{{ c.name }}.html">{{ c.name }}</a>
<span class="badge {{ c.badge[0] }}">{{ c.badge[1] }}</span></h3>
<p>{{ c.claim | safe }}</p>
{%- if c.figure %}
<a href="{{ c.name }}.html"><img src="{{ c.figure }}" alt="{{ c.name }}: key figure"></a>
{%- endif %}
</section>
{%- endfor %}
</div>
{%- endif %}
{{ body | safe }}
</main>
<script>
// Click a header to sort its table by that column (numbers by value, text otherwise).
function cellKey(text) {
  const m = text.replace(/,/g, "").match(/-?\\d+(\\.\\d+)?(e-?\\d+)?/);
  return m && !/^[a-z_`*(]/i.test(text.trim()) ? [0, parseFloat(m[0]), text] : [1, 0, text];
}
function compare(a, b) {
  return a[0] - b[0] || a[1] - b[1] || a[2].localeCompare(b[2]);
}
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("thead th").forEach((th, col) => th.addEventListener("click", () => {
    const order = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    table.querySelectorAll("thead th").forEach(h => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", order);
    const body = table.tBodies[0];
    const rows = Array.from(body.rows).map(r => [cellKey(r.cells[col].textContent), r]);
    rows.sort((x, y) => compare(x[0], y[0]) * (order === "ascending" ? 1 : -1));
    rows.forEach(([, r]) => body.appendChild(r));
  }));
}
</script>
</body>
</html>
"""
