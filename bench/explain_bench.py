#!/usr/bin/env python3
"""File size and render time of the explain view (`plan --html`) for 2, 64 and 16,384 GPUs.

For each size: plan a model on dgx-h100 (its partition widened to 4,096 nodes; planning is not
timed), build the HTML page (median of the runs) and the standalone SVG, and, when Debian's
chromium and selenium are installed, load the page in headless Chromium (navigation start to
load event). Target: every page under 2 MB (the
ratio column, below 1.0 is good) and built in well under a second.

    python bench/explain_bench.py [--runs 5] [--no-browser]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slurmgpu.plan import PlanRequest, get_model, make_plan
from slurmgpu.site import resolve_site
from slurmgpu.view import Topology, plan_page, svg

CASES = (
    ("2 GPUs", "llama3-8b", dict(task="inference", gpus=2)),
    ("64 GPUs", "llama3-70b", dict(nodes=8)),
    ("16,384 GPUs", "llama3.1-405b", dict(nodes=2048)),
)
LIMIT = 2_000_000


def _browser() -> Optional[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        return None
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(executable_path=driver), options=opts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    site, _ = resolve_site("dgx-h100", {})
    # a 2,048-node partition of the same nodes, for the largest case (the preset stops at 32)
    big = {k: replace(p, nodes=4096, max_nodes_per_job=4096) for k, p in site.partitions.items()}
    site = replace(site, partitions=big)
    nt = site.node_type_of(site.default_partition)
    drv = None if args.no_browser else _browser()
    print(
        "%-12s %-28s %8s %10s %9s %9s %10s %12s"
        % ("size", "layout", "cells", "HTML KB", "ratio", "SVG KB", "build ms", "browser ms")
    )
    tmp = Path(tempfile.mkdtemp(prefix="explain-bench-"))
    try:
        for label, model, kw in CASES:
            plan = make_plan(site, PlanRequest(model=get_model(model), **kw))  # type: ignore[arg-type]
            lay = plan.layout
            topo = Topology.of(nt, lay.gpus_per_node, segment=plan.segment)
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                page = plan_page(plan, topo)
                times.append(time.perf_counter() - t0)
            pic = svg(lay, topo)
            size = len(page.encode("utf-8"))
            cells = page.count('<rect class="gpu ')
            shown = "-"
            if drv is not None:
                path = tmp / "page.html"
                path.write_text(page, encoding="utf-8")
                loads = []
                for _ in range(args.runs):
                    drv.get(path.as_uri())
                    loads.append(
                        drv.execute_script(
                            "var t = performance.getEntriesByType('navigation')[0];"
                            " return t.loadEventEnd - t.startTime;"
                        )
                    )
                shown = "%.1f" % statistics.median(loads)
            print(
                "%-12s %-28s %8d %10.1f %9.3f %9.1f %10.2f %12s"
                % (
                    label,
                    "TP%d PP%d DP%d CP%d x%d nodes" % (lay.tp, lay.pp, lay.dp, lay.cp, lay.nodes),
                    cells,
                    size / 1e3,
                    size / LIMIT,
                    len(pic.encode("utf-8")) / 1e3,
                    statistics.median(times) * 1e3,
                    shown,
                )
            )
    finally:
        if drv is not None:
            drv.quit()
        shutil.rmtree(tmp, ignore_errors=True)
    if drv is None and not args.no_browser:
        print("(no browser column: install chromium, chromium-driver and selenium)", file=sys.stderr)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
