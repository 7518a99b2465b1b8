"""The explain HTML view shows which CPUs and NIC each GPU's rank uses (issue 30): from the launcher's
binding for `gen --explain-html`, from the site map for `plan --html`, and why not where none applies."""

from __future__ import annotations

import re

from click.testing import CliRunner

from slurmgpu.cli import main


def page(tmp_path, *args):
    out = tmp_path / "view.html"
    res = CliRunner().invoke(
        main, list(args[:1]) + ["--explain-html" if args[0] == "gen" else "--html", str(out)] + list(args[1:])
    )
    assert res.exit_code == 0, res.output
    return out.read_text()


def rows(html):
    table = re.search(r'<table class="binding">.*?</table>', html, re.S)
    assert table, "no binding table"
    return re.findall(
        r"<tr><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td>"
        r"<td class=\"l\">([^<]*)</td><td class=\"l\">([^<]*)</td></tr>",
        table.group(0),
    )


def test_gen_page_shows_each_ranks_cpus_and_nic(tmp_path):
    html = page(tmp_path, "gen", "--launcher", "srun", "--nodes", "2", "--", "train.py")
    got = rows(html)
    assert len(got) == 8
    assert got[0] == ("0", "0", "0", "0-55,112-167", "mlx5_0") and got[5] == ("5", "5", "1", "56-111,168-223", "mlx5_9")
    assert "srun --cpu-bind=mask_cpu: each task on its GPU&#x27;s CPUs" in html


def test_deepspeed_page_shows_its_share_of_the_node(tmp_path):
    got = rows(
        page(tmp_path, "gen", "--launcher", "deepspeed", "--nodes", "2", "--tp", "1", "--pp", "1", "--", "train.py")
    )
    assert [r[3] for r in got][:2] == ["0-13", "14-27"]


def test_plan_page_shows_the_site_map_and_unknown_maps_say_why(tmp_path):
    html = page(tmp_path, "plan", "--model", "llama3-8b", "--site", "gb200-nvl72", "--nodes", "2")
    assert [r[2:] for r in rows(html)] == [
        ("0", "0-71", "mlx5_0"),
        ("0", "0-71", "mlx5_1"),
        ("1", "72-143", "mlx5_4"),
        ("1", "72-143", "mlx5_5"),
    ]
    html = page(tmp_path, "plan", "--model", "llama3-8b", "--site", "aws-p5", "--nodes", "1")
    assert "no GPU/NUMA/CPU map for node type p5-48xlarge" in html and 'class="binding"' not in html
