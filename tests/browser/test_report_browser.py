"""The report in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium) opens every page of the report built from the committed quick outputs, and checks that each page loads,
every image decodes, every internal link (and its anchor) resolves, nothing is fetched from a network, the
formulas are MathML, no table cell reads NaN, and the index has one row per claim of every study. A screenshot of
each page lands in the test's temporary folder.

``.ci/run`` installs the browser; where it cannot (no package registry), it sets ``HEADPRUNE_NO_BROWSER`` to the
reason and this test is skipped with it. Without that variable a missing browser is a failure under CI.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from headprune_utils.store.paths import StudyPaths
from headprune_utils.run.report import build_report
from headprune_utils.studies import STUDIES

pytestmark = pytest.mark.browser

PROFILE = "quick"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _browser_or_skip():
    reason = os.environ.get("HEADPRUNE_NO_BROWSER")
    if reason:
        pytest.skip(f"no browser here: {reason}")
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", DRIVER)) if not p]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        msg = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg + "; .ci/run installs them or sets HEADPRUNE_NO_BROWSER to why it cannot")
        pytest.skip(msg)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1600", "--allow-file-access-from-files"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


def _ids(path: Path, cache: dict) -> set[str]:
    if path not in cache:
        p = _Ids()
        p.feed(path.read_text(encoding="utf-8"))
        cache[path] = p.ids
    return cache[path]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not StudyPaths("random_pruning", PROFILE, staged=False).notebook.exists():
        pytest.skip("no committed quick outputs in this checkout")
    root = tmp_path_factory.mktemp("report")
    t0 = time.perf_counter()
    home = build_report([PROFILE], quiet=True, root=root)
    seconds = time.perf_counter() - t0
    return home, root, seconds


def test_report_builds_within_a_minute(site):
    _, root, seconds = site
    assert seconds < 60, f"the report took {seconds:.0f} s to build"
    pages = sorted(p.name for p in (root / PROFILE).glob("*.html"))
    assert pages == sorted(["index.html"] + [f"{n}.html" for n in STUDIES])


def crawl(driver, home: Path, root: Path, shots: Path) -> tuple[list[str], set[Path]]:
    """Every page reachable from ``home`` inside ``root``, opened in the browser: the problems found, the pages
    seen. A screenshot of each page goes to ``shots``."""
    todo, seen, ids_cache, problems = [home.resolve()], set(), {}, []
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        driver.get(page.as_uri())
        state = driver.execute_script("return document.readyState")
        title = driver.title
        if state != "complete" or not title:
            problems.append(f"{page.name}: did not load (readyState {state}, title {title!r})")
        # every image decodes
        for src, complete, width in driver.execute_script(
                "return [...document.images].map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])"):
            if not complete or not width:
                problems.append(f"{page.name}: image does not decode: {src[:100]}")
        # nothing from a network: every resource the page loaded is a file or inline data
        for name in driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"):
            if not name.startswith(("file:", "data:")):
                problems.append(f"{page.name}: fetched {name}")
        # formulas are MathML, never raw LaTeX
        text = driver.execute_script("return document.body.innerText")
        raw = re.search(r".{0,40}\$[^$\n]*\\[a-zA-Z]+.{0,20}", text)
        if raw:
            problems.append(f"{page.name}: raw LaTeX in the text: {raw.group(0)!r}")
        nan_cells = driver.execute_script(
            "return [...document.querySelectorAll('td,th')].filter(c => /^\\s*(NaN|nan)\\s*$/.test(c.textContent)).length")
        if nan_cells:
            problems.append(f"{page.name}: {nan_cells} table cells read NaN")
        driver.save_screenshot(str(shots / f"{page.parent.name}-{page.stem}.png"))
        # every internal link resolves, to the anchor where there is one
        for href in driver.execute_script("return [...document.links].map(a => a.href)"):
            u = urlparse(href)
            if u.scheme != "file":
                continue
            target = Path(unquote(u.path))
            if not target.exists():
                problems.append(f"{page.name}: broken link {href}")
                continue
            if target.suffix == ".html":
                # as a browser resolves a fragment: the id as written, else percent-decoded
                if u.fragment and not {u.fragment, unquote(u.fragment)} & _ids(target, ids_cache):
                    problems.append(f"{page.name}: link to a missing anchor {href}")
                if root.resolve() in target.resolve().parents:
                    todo.append(target.resolve())
    return problems, seen


def test_every_page_in_a_real_browser(site, tmp_path):
    home, root, _ = site
    driver = _browser_or_skip()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        problems, seen = crawl(driver, home, root, shots)
        driver.get((root / PROFILE / "index.html").as_uri())
        rows = driver.execute_script(
            "return [...document.querySelectorAll('table.claims tr.claim')].map(r => r.id)")
    finally:
        driver.quit()
    assert not problems, "\n".join(problems[:40])
    expected = {f"row-{name}-{c.id}" for name, st in STUDIES.items() for c in st.claims}
    assert len(rows) == len(set(rows)), "a claim has two rows in the index"
    assert set(rows) == expected, (f"missing: {sorted(expected - set(rows))}; extra: {sorted(set(rows) - expected)}")
    assert seen == {p.resolve() for p in root.rglob("*.html")}, "a page is not reachable from the home page"
    assert len(list(shots.glob("*.png"))) == len(seen)


def test_the_crawl_finds_what_is_broken(tmp_path):
    """The checks can fail: a small site with one of each fault."""
    import base64

    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
    (tmp_path / "ok.png").write_bytes(png)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    (tmp_path / "index.html").write_text(
        '<!DOCTYPE html><html><head><title>t</title></head><body><img src="ok.png"><img src="bad.png">'
        '<a href="b.html#there">b</a><a href="b.html#nowhere">b</a><a href="gone.html">x</a>'
        "<table><tr><td>NaN</td><td>1</td></tr></table><p>$\\alpha_h$</p></body></html>")
    (tmp_path / "b.html").write_text('<!DOCTYPE html><html><head><title>b</title></head><body>'
                                     '<h2 id="there">b</h2><a href="index.html">home</a></body></html>')
    driver = _browser_or_skip()
    try:
        problems, seen = crawl(driver, tmp_path / "index.html", tmp_path, tmp_path)
    finally:
        driver.quit()
    text = "\n".join(problems)
    assert "image does not decode" in text and "bad.png" in text and "ok.png" not in text
    assert "missing anchor" in text and "#nowhere" in text and "#there" not in text
    assert "broken link" in text and "gone.html" in text
    assert "1 table cells read NaN" in text
    assert "raw LaTeX" in text
    assert len(problems) == 5, text
    assert {p.name for p in seen} == {"index.html", "b.html"}


def test_formulas_render_as_mathml(site):
    _, root, _ = site
    html = (root / PROFILE / "random_pruning.html").read_text(encoding="utf-8")
    assert "<math" in html and "HPMATHX" not in html
    assert "$g_h" not in html


WIDTHS = (1280, 1920)
# tables the reader scans whole: no column may be clipped (scrolled out of view) at these widths
_WIDTH_CHECK = """
const main = document.querySelector('main') || document.body;
const right = main.getBoundingClientRect().right + 1;
const out = [];
if (document.documentElement.scrollWidth > window.innerWidth + 1)
  out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
for (const t of document.querySelectorAll('table.claims, table.reasons')) {
  if (t.scrollWidth > t.clientWidth + 1 || t.getBoundingClientRect().right > right)
    out.push('a clipped column in table.' + t.className + ': ' + t.scrollWidth + ' > ' + t.clientWidth);
}
for (const i of document.images) {
  const b = i.getBoundingClientRect();
  if (b.right > right || b.width > main.clientWidth + 1)
    out.push('a figure wider than the page: ' + (i.getAttribute('src') || '').slice(-60) + ' ' + Math.round(b.width));
}
return out;
"""


def width_problems(driver, pages: list[Path]) -> list[str]:
    """Every page of ``pages`` at each of :data:`WIDTHS`: no sideways scroll, no clipped column in a findings or
    reasons table, no figure wider than the text column."""
    problems = []
    for width in WIDTHS:
        driver.set_window_size(width, 1000)
        for page in pages:
            driver.get(page.as_uri())
            problems += [f"{page.parent.name}/{page.name} at {width} px: {p}"
                         for p in driver.execute_script(_WIDTH_CHECK)]
    return problems


@pytest.fixture(scope="module")
def both_profiles(tmp_path_factory):
    have = [p for p in ("standard", "quick") if StudyPaths("random_pruning", p, staged=False).notebook.exists()]
    if not have:
        pytest.skip("no committed outputs in this checkout")
    root = tmp_path_factory.mktemp("report-widths")
    build_report(have, quiet=True, root=root)
    return root


def test_pages_fit_1280_and_1920_px(both_profiles):
    """The findings table's figure column was clipped at 1400 px (the table scrolled inside the page); every page
    at 1280 and 1920 px shows its findings and reasons tables whole and its figures within the text column."""
    driver = _browser_or_skip()
    try:
        problems = width_problems(driver, sorted(both_profiles.rglob("*.html")))
    finally:
        driver.quit()
    assert not problems, "\n".join(problems[:40])


def test_the_width_check_finds_a_clipped_column(tmp_path):
    """The check can fail: a findings table wider than the page, and a figure drawn wider than its column."""
    cells = "".join(f"<td>{'x' * 40}&nbsp;{'y' * 40}</td>" for _ in range(6))
    (tmp_path / "index.html").write_text(
        '<!DOCTYPE html><html><head><title>t</title><style>main{max-width:1100px;margin:auto}'
        "table{display:block;overflow-x:auto;max-width:100%}td{white-space:nowrap}</style></head><body><main>"
        f'<table class="claims"><tr>{cells}</tr></table><img src="x.png" style="width:2400px;height:10px">'
        "</main></body></html>")
    driver = _browser_or_skip()
    try:
        problems = width_problems(driver, [tmp_path / "index.html"])
    finally:
        driver.quit()
    text = "\n".join(problems)
    assert "a clipped column in table.claims" in text and "a figure wider than the page" in text
    assert text.count("at 1280 px") >= 2 and text.count("at 1920 px") >= 2
