"""`bench site`: the committed leaderboards as HTML. The committed `site/` is what the code
renders now; in headless Chromium every page's tables render and sort and every image loads."""

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.analysis.site import badge, build_site, find_boards, find_reports, verdict_section
from bench.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
NUMBER = re.compile(r"^-?\d[\d,]*(\.\d+)?$")


def test_the_committed_site_is_what_the_code_renders(tmp_path):
    pages = build_site(ROOT, tmp_path, links_from=ROOT / "site")
    names = sorted(p.name for p in pages)
    assert names == sorted(p.name for p in (ROOT / "site").glob("*.html")), \
        "site/ is stale: run `bench site`"
    for page in pages:
        assert page.read_text() == (ROOT / "site" / page.name).read_text(), \
            f"site/{page.name} is stale: run `bench site`"


def test_every_leaderboard_has_a_page_with_its_verdict_table_and_figures(tmp_path):
    build_site(ROOT, tmp_path)
    boards = find_boards(ROOT)
    assert {b.name for b in boards} >= {"quickstart", "heads", "depth"}
    _, header, rows = verdict_section((ROOT / "README.md").read_text())
    assert header == ["claim", "verdict here", "leaderboard"] and len(rows) >= len(boards)
    index = (tmp_path / "index.html").read_text()
    reports = find_reports(ROOT)  # the suite's: a page each, a card each
    assert [r.name for r in reports] == ["suite-smoke"]
    assert index.count('<section class="card">') == len(boards) + len(reports)
    smoke = (tmp_path / "suite-smoke.html").read_text()
    assert "<summary>cell induction</summary>" in smoke and "maps measured" in smoke
    for b in boards:
        assert f'href="{b.name}.html"' in index
        page = (tmp_path / f"{b.name}.html").read_text()
        assert "<table class=\"sortable\">" in page and "Verdict" in page
        shown = "".join(p.read_text() for p in b.directory.glob("*.md"))
        for png in b.directory.glob("*.png"):  # every committed figure the markdown shows
            if png.name in shown:
                assert os.path.relpath(png, tmp_path) in page
    assert ".md\"" not in index  # links to a leaderboard's markdown became its page


def test_a_root_without_leaderboards_is_one_line(tmp_path, cli):
    code, captured = cli("site", "--root", str(tmp_path), "--out", str(tmp_path / "s"))
    assert code == 2 and captured.err.strip() == (
        f"error: --root: {tmp_path} holds no committed leaderboard "
        "(leaderboards/NAME.yaml with NAME/leaderboard.md or NAME/README.md)")
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError, match="no '## What the leaderboards show' section"):
        verdict_section("# a README\n")


def test_an_out_that_is_a_file_is_one_line_and_left_alone(tmp_path, cli):
    (tmp_path / "afile").write_text("mine")
    for out in (tmp_path / "afile", tmp_path / "afile" / "site"):
        code, captured = cli("site", "--out", str(out))
        assert code == 2 and captured.err.strip() == (
            f"error: --out: {tmp_path / 'afile'} is a file; the site is a folder of pages (give "
            "a folder, new or one the site was written to)")
        assert (tmp_path / "afile").read_text() == "mine"


HARNESS = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="f" src="PAGE"></iframe>
<script>
document.getElementById("f").onload = () => {
  const d = document.getElementById("f").contentDocument;
  const column = (t, c) => Array.from(t.tBodies[0].rows, r => r.cells[c].textContent.trim());
  const report = {
    images: Array.from(d.images, i => [i.getAttribute("src"), i.complete && i.naturalWidth > 0]),
    links: Array.from(d.querySelectorAll("a[href$='.html']"), a => a.getAttribute("href")),
    cards: d.querySelectorAll(".card").length,
    badges: Array.from(d.querySelectorAll(".badge"),
                       b => [b.textContent, getComputedStyle(b).backgroundColor]),
    collapsed: Array.from(d.querySelectorAll("details"), e => e.open),
    tables: Array.from(d.querySelectorAll("table.sortable"), t => {
      const heads = Array.from(t.tHead.rows[0].cells);
      return {rows: t.tBodies[0].rows.length, columns: heads.map((th, c) => {
        const before = column(t, c);
        th.click(); const up = column(t, c); const upSort = th.getAttribute("aria-sort");
        th.click(); const down = column(t, c); const downSort = th.getAttribute("aria-sort");
        return {before, up, down, upSort, downSort};
      })};
    }),
  };
  document.getElementById("out").textContent = JSON.stringify(report);
};
</script></body></html>"""


def browser() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)


def open_in_chromium(page: Path, tmp_path: Path) -> dict:
    harness = tmp_path / f"harness-{page.stem}.html"
    harness.write_text(HARNESS.replace("PAGE", page.resolve().as_uri()))
    proc = subprocess.run(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu",
         "--allow-file-access-from-files", "--virtual-time-budget=20000", "--dump-dom",
         harness.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="out">(.*?)</pre>', proc.stdout, re.S)
    assert found and found.group(1) != "pending", proc.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def value(cell: str) -> float:
    return float(cell.replace(",", ""))


@pytest.mark.skipif(browser() is None and not os.environ.get("REQUIRE_BROWSER"),
                    reason="no Chromium here (make test installs Debian's chromium)")
def test_in_chromium_tables_render_and_sort_and_every_image_loads(tmp_path):
    site = tmp_path / "site"
    pages = build_site(ROOT, site)
    sorted_numeric = 0
    for page in pages:
        report = open_in_chromium(page, tmp_path)
        assert report["tables"], f"{page.name}: no table rendered"
        # every rendered board shows a figure; the index and a running sweep's findings page
        # (no leaderboard.md yet) need not
        rendered = (ROOT / "leaderboards" / page.stem / "leaderboard.md").is_file()
        assert report["images"] or not rendered or page.name == "mixers.html", \
            f"{page.name}: no figure"
        for src, loaded in report["images"]:
            assert loaded, f"{page.name}: image {src} did not load"
        for href in report["links"]:
            assert (site / href).is_file(), f"{page.name}: dead link {href}"
        for table in report["tables"]:
            assert table["rows"] >= 1
            for col in table["columns"]:
                assert col["upSort"] == "ascending" and col["downSort"] == "descending"
                assert sorted(col["up"]) == sorted(col["before"])  # rows moved, none lost
                if len(set(col["before"])) > 1 and all(NUMBER.match(c) for c in col["before"]):
                    assert [value(c) for c in col["up"]] == sorted(map(value, col["before"]))
                    assert [value(c) for c in col["down"]] == sorted(
                        map(value, col["before"]), reverse=True)
                    sorted_numeric += 1
    assert sorted_numeric >= 10  # numeric columns (params, steps/s, ...) checked by value


@pytest.mark.skipif(browser() is None and not os.environ.get("REQUIRE_BROWSER"),
                    reason="no Chromium here (make test installs Debian's chromium)")
def test_in_chromium_the_index_is_a_grid_of_badged_boards_and_a_board_page_leads_with_its_verdict(
        tmp_path):
    from matplotlib.image import imread

    site = tmp_path / "site"
    build_site(ROOT, site)
    boards = find_boards(ROOT) + find_reports(ROOT)  # the suite's reports have cards too
    index = open_in_chromium(site / "index.html", tmp_path)
    assert index["cards"] == len(boards)
    labels = {"agrees", "partly", "differs", "not significant", "descriptive", "no verdict yet"}
    assert len(index["badges"]) == len(boards)
    for text, colour in index["badges"]:  # coloured: the stylesheet applied, not bare text
        assert text in labels and colour not in ("rgba(0, 0, 0, 0)", "transparent"), (text, colour)
    assert {t for t, _ in index["badges"]} >= {"agrees", "partly"}
    page = open_in_chromium(site / "heads.html", tmp_path)
    assert [t for t, _ in page["badges"]] == ["agrees"]
    assert page["collapsed"] and not any(page["collapsed"])  # conventions start folded
    for name in ("index", "heads"):  # screenshots: rendered pages, not blank ones
        shot = tmp_path / f"{name}.png"
        subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--allow-file-access-from-files", "--virtual-time-budget=10000",
                        "--window-size=1400,1800", f"--screenshot={shot}",
                        (site / f"{name}.html").as_uri()], capture_output=True, timeout=120)
        pixels = imread(shot)
        assert pixels.shape[:2] == (1800, 1400) and pixels[..., :3].std() > 0.05, name


@pytest.mark.parametrize("verdict, expected", [
    ("**agrees**: median 100 vs 425", "agrees"),
    ("**partly** (8 seeds a row)", "partly"),
    ("**disagrees** at 2%", "differs"),
    ("**not supported at this scale**: no warm-up", "not significant"),
    ("longer: **leans agrees, not significant** (...); sparsity: **differs**: ...", "partly"),
    ("longer: **differs**; shorter: **differs**", "differs"),
    ("MLP-Mixer sooner than the transformer on both tasks", "descriptive"),
])
def test_a_verdict_cell_gets_the_badge_its_words_say(verdict, expected):
    assert badge(verdict)[1] == expected
