"""``report.html`` in a real browser (Debian's /usr/bin/chromium, driven by Playwright):
no console error, no request leaving the folder, every link resolving to a file inside it,
no script from a run's output running; a screenshot is left in pytest's tmp dir.

Needs the ``report-test`` extra (``pip install -e '.[report-test]'``) and the chromium
package; ``.ci/run`` installs both.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from support import needs
from support.eval_support import compare, copy_runs

CHROMIUM = needs.CHROMIUM
sync_api = needs.extra("playwright.sync_api", "report-test")
pytestmark = [pytest.mark.slow, needs.chromium]


def _inside(url: str, folder: Path) -> Path | None:
    """The file a ``file://`` URL names, if it is inside ``folder``."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc:
        return None
    path = Path(unquote(parts.path))
    return path if folder == path or folder in path.parents else None


def test_the_report_stands_alone_in_a_browser(tmp_path: Path) -> None:
    runs = copy_runs(tmp_path / "made")
    compare(runs)
    # Read where it was moved to: nothing may depend on where it was written.
    folder = tmp_path / "moved" / "report folder"
    folder.parent.mkdir()
    shutil.move(str(runs), str(folder))
    requests: list[str] = []
    problems: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})

            def route(route: Any) -> None:
                requests.append(route.request.url)
                if _inside(route.request.url, folder) is None:
                    route.abort()
                else:
                    route.continue_()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: problems.append(f"a dialog opened: {d.message}"))
            page.goto((folder / "report.html").as_uri(), wait_until="load")
            hrefs: list[list[str]] = page.eval_on_selector_all(
                "a[href]", "links => links.map(a => [a.getAttribute('href'), a.href])"
            )
            ids = set(page.eval_on_selector_all("[id]", "nodes => nodes.map(n => n.id)"))
            page.click("#case-0 details summary")  # a failure body is one click away
            snippet = page.inner_text("#case-0 .failure pre")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    outside = [url for url in requests if _inside(url, folder) is None]
    problems += [f"request outside the folder: {url}" for url in outside]
    assert problems == []
    assert requests == [(folder / "report.html").as_uri()]
    assert len(hrefs) > 20
    for written, resolved in hrefs:
        if written.startswith("#"):
            assert written[1:] in ids, written
            continue
        target = _inside(resolved.split("#")[0], folder)
        assert target is not None and target.is_file(), written
    assert "500 Internal Server Error" in snippet
    assert (tmp_path / "report.png").stat().st_size > 10_000
