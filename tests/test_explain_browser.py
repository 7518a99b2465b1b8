"""The explain view in a real browser: Debian's headless Chromium driven by selenium.

Needs `chromium` and `chromium-driver` (contrib/testcluster/install-deps.sh) and selenium (the
`test` extra). Skipped without them, a failure under SLURMGPU_REQUIRE_CLUSTER=1 (CI) or
SLURMGPU_REQUIRE_BROWSER=1: a browser test that silently does not run is not a pass.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from tests.explain_util import png_stats, run_cli

pytestmark = pytest.mark.browser

RED = "rgb(214, 39, 40)"


def _unavailable(reason: str) -> None:
    for var in ("SLURMGPU_REQUIRE_CLUSTER", "SLURMGPU_REQUIRE_BROWSER"):
        if os.environ.get(var) == "1":
            pytest.fail("headless Chromium required (%s=1) but unavailable: %s" % (var, reason), pytrace=False)
    pytest.skip("headless Chromium unavailable: %s" % reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (pip install -e '.[test]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    if not binary or not driver_path:
        _unavailable("chromium/chromedriver not found (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


def _open(browser: Any, path: Path) -> None:
    browser.get(path.resolve().as_uri())


def _fills(browser: Any, scope: str = "") -> Dict[int, str]:
    got = browser.execute_script(
        "var out = {}; document.querySelectorAll(arguments[0] + ' rect.gpu').forEach(function (e) {"
        " out[e.getAttribute('data-rank')] = getComputedStyle(e).fill; }); return out;",
        scope,
    )
    return {int(k): v for k, v in got.items()}


def _choose(browser: Any, kind: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, 'label[for="c-%s"]' % kind).click()
    assert browser.find_element(By.ID, "c-%s" % kind).is_selected()


def test_two_node_tp8_pp2_renders_16_cells_in_group_colours(browser: Any, tmp_path: Path) -> None:
    r = run_cli(
        tmp_path,
        *"plan --model llama3-70b --site dgx-h100 --task inference --nodes 2 --tp 8 --pp 2 --html p.html".split(),
    )
    assert r.returncode == 0, r.stderr
    _open(browser, tmp_path / "p.html")
    colours, variance = png_stats(browser.get_screenshot_as_png())
    assert colours > 8 and variance > 100, "blank screenshot (%d colours, variance %.1f)" % (colours, variance)
    fills = _fills(browser)
    assert sorted(fills) == list(range(16))
    assert len({fills[r] for r in range(8)}) == 1 and fills[0] != fills[8]  # TP groups 0-7, 8-15
    assert len(set(fills.values())) == 2
    _choose(browser, "pp")
    pp = _fills(browser)
    assert len(set(pp.values())) == 2 and pp[0] != pp[8]  # PP=2: node 0 stage 0, node 1 stage 1
    _choose(browser, "cp")
    assert len(set(_fills(browser).values())) == 1  # CP=1: one colour, unlike the 2 TP groups
    bars = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg.stages g.stage')).map(function (g) {"
        " return [g.getAttribute('data-label'), Array.from(g.querySelectorAll('rect.part')).map("
        "function (r) { return [r.getAttribute('data-part'), r.getBBox().width]; })]; });"
    )
    assert [b[0] for b in bars] == ["stage 0 (40 layers)", "stage 1 (40 layers)"]  # one bar per PP stage
    for _, parts in bars:  # rendered, with the KV cache as a visible segment
        assert dict(parts)["kv cache"] > 1 and all(w > 0 for _, w in parts)


def test_gb200_72_gpu_domain(browser: Any, tmp_path: Path) -> None:
    r = run_cli(tmp_path, *"plan --model llama3-70b --site gb200-nvl72 --nodes 18 --tp 8 --html g.html".split())
    assert r.returncode == 0, r.stderr
    _open(browser, tmp_path / "g.html")
    fills = _fills(browser)
    assert len(fills) == 72
    assert len(set(fills.values())) == 9 and RED not in fills.values()  # 9 TP groups, none leaves the domain
    assert browser.execute_script("return document.querySelectorAll('rect.domain').length") == 1
    _choose(browser, "dp")
    dp = _fills(browser)
    assert len(set(dp.values())) == 9  # DP=9 replicas
    assert {dp[r] for r in range(8)} == {dp[0]} and dp[0] != dp[8]


def test_ep_colouring_changes_the_expected_cells(browser: Any, tmp_path: Path) -> None:
    # 16 GPUs: TP=4 x DP=4 with EP=2; an EP group is TP rank t of replicas {0,1} or {2,3}
    (tmp_path / "moe.sbatch").write_text(
        "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\n"
        "# slurmgpu: site=dgx-h100 tp=4 pp=1 dp=4 cp=1 ep=2 nodes=2 gpus_per_node=8\nsrun x\n"
    )
    r = run_cli(tmp_path, "check", "--site", "dgx-h100", "moe.sbatch", "--html", "m.html")
    assert r.returncode == 0, r.stdout + r.stderr
    _open(browser, tmp_path / "m.html")
    before = _fills(browser)
    assert before[0] == before[3] != before[4]  # TP colouring: 0-3 one group, 4-7 the next
    _choose(browser, "ep")
    after = _fills(browser)
    assert after != before
    assert after[0] == after[4] != after[8]  # rank 0 (replica 0) and 4 (replica 1) share EP group 0
    assert after[0] != after[1]  # a different TP rank: another EP group
    assert after[8] == after[12]
    # keyboard: arrow keys move between the radios (plain HTML), no script needed
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.find_element(By.ID, "c-ep").send_keys(Keys.ARROW_LEFT)
    assert browser.find_element(By.ID, "c-cp").is_selected()


def test_rejected_tp16_job_shows_the_crossing_group_in_red(browser: Any, tmp_path: Path) -> None:
    (tmp_path / "tp16.sbatch").write_text(
        "#!/bin/bash\n#SBATCH -N2 --gpus-per-node=8\nsrun x --tensor-model-parallel-size 16\n"
    )
    r = run_cli(tmp_path, "check", "--site", "dgx-h100", "tp16.sbatch", "--html", "c.html")
    assert r.returncode == 1
    _open(browser, tmp_path / "c.html")
    submitted = _fills(browser, "#submitted-svg")
    fix = _fills(browser, "#fix-svg")
    assert set(submitted.values()) == {RED} and len(submitted) == 16
    assert RED not in fix.values() and len(set(fix.values())) == 2
    line = browser.execute_script(
        "var l = document.querySelector('#submitted-svg line.crossing'); return l && getComputedStyle(l).stroke;"
    )
    assert line == RED
    assert browser.execute_script("return document.querySelector('#fix-svg line.crossing')") is None
    colours, variance = png_stats(browser.get_screenshot_as_png())
    assert colours > 8 and variance > 100
