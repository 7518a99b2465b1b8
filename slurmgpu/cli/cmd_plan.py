"""`models` and `plan`."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Optional

import click

from .. import vocab
from ..errors import SlurmgpuError
from .app import alias, exits, main
from .cmd_job import _job_spec, _spec_for_site, looked_in
from .common import OUTPUT_FILE, VocabChoice, _emit_json, _load_site
from .explain_out import HTML_HELP, plan_view


@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def models_cmd(as_json: bool) -> None:
    """List the model catalogue (the names --model accepts).

    Parameter counts are computed from each shape, the way custom models are sized.

    \b
    Examples:
      slurmgpu models
      slurmgpu models --json
    """
    from ..plan import aliases_of, catalogue, fmt_params

    models = catalogue()
    if as_json:
        _emit_json([dict(m.to_dict(), aliases=aliases_of(m.name)) for m in models])
        return
    head = ("NAME", "PARAMS", "ACTIVE", "LAYERS", "HIDDEN", "HEADS/KV", "FFN", "VOCAB", "SEQ", "ALIASES")
    rows = [head]
    for m in models:
        ffn = "%dx%d" % (m.experts, m.expert_ffn) if m.is_moe else str(m.ffn)
        rows.append(
            (
                m.name,
                fmt_params(m.params),
                fmt_params(m.active_params),
                str(m.layers),
                str(m.hidden),
                "%d/%d" % (m.heads, m.kv_heads),
                ffn,
                str(m.vocab),
                str(m.seq),
                ",".join(aliases_of(m.name)) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@main.command("plan")
@click.option(
    "--model",
    "model_ref",
    metavar="NAME|FILE",
    help="Catalogue model (see `slurmgpu models`), "
    "a model YAML file (layers, hidden, heads, kv_heads, ffn, vocab, seq; MoE: experts, "
    "experts_active, moe_ffn), or a size such as 13B.",
)
@click.option("--params", metavar="SIZE", help="A model of this many parameters (e.g. 13B); shape estimated.")
@click.option(
    "--site",
    "site_name",
    metavar="NAME|PATH",
    help="Site config (default: $SLURMGPU_SITE, /etc/slurmgpu/site.yaml, ~/.config/slurmgpu/site.yaml, then dgx-h100).",
)
@click.argument("spec_file", metavar="[SPEC]", required=False, type=click.Path(dir_okay=False))
@alias("--spec", "the SPEC argument (slurmgpu plan FILE ...), as in gen", "spec_file", metavar="FILE")
@click.option("--partition", help="Partition (default: the spec's, else the site's).")
@click.option(
    "--launcher",
    type=click.Choice(vocab.LAUNCHERS),
    help="Plan for this launcher's layouts and its framework's memory rules (default: the spec's; "
    "without a spec, any layout with the ZeRO paper's mixed-precision Adam).",
)
@click.option(
    "--task",
    type=VocabChoice(vocab.TASKS, dict(vocab.TASK_ALIASES)),
    help="What to size for; finetune is full fine-tuning (default: the spec's, else pretrain).",
)
@click.option("--gpus", type=int, help="Plan for exactly this many GPUs.")
@click.option("--nodes", type=int, help="Plan for exactly this many whole nodes.")
@click.option("--seq", type=int, help="Sequence length (inference: context length). Default: the model's.")
@click.option(
    "--global-batch",
    type=int,
    help="Sequences per optimizer step (inference: concurrent sequences). Default: ~4M tokens for pretraining.",
)
@click.option(
    "--tokens",
    metavar="N",
    help="Training tokens (e.g. 15T): prints the time to train and how it scales with more nodes.",
)
@click.option("--target-days", type=float, help="With --tokens: the smallest node count that trains in time.")
@click.option("--precision", type=VocabChoice(vocab.PRECISIONS), help="Number format (default: the spec's, else bf16).")
@click.option(
    "--optimizer",
    default="adam",
    show_default=True,
    type=click.Choice(["adam", "adam8bit", "sgd"]),
    help="Optimizer state: adam is 12 B/param on top of 16-bit weights and gradients.",
)
@click.option(
    "--zero",
    type=click.IntRange(0, 3),
    help="ZeRO stage over DP (default: distributed optimizer, ZeRO-1; 2/3 only when needed and PP=1).",
)
@click.option(
    "--recompute",
    type=click.Choice(vocab.RECOMPUTE),
    help="Activation recomputation (default: selective, full only when needed).",
)
@click.option("--tp", type=int, help="Pin tensor parallelism.")
@click.option("--pp", type=int, help="Pin pipeline parallelism.")
@click.option("--dp", type=int, help="Pin data parallelism.")
@click.option("--cp", type=int, help="Pin context parallelism.")
@click.option("--ep", type=int, help="Pin expert parallelism (MoE).")
@click.option("--micro-batch", type=int, help="Pin the micro-batch size.")
@click.option(
    "--serve",
    type=click.Choice(vocab.SERVE_MODES),
    help="With --task inference: the deployment to size (default: the spec's, else aggregated); "
    "every mode is compared on the same nodes.",
)
@click.option("--input-len", type=int, metavar="TOKENS", help="Inference: prompt tokens per request (default 1024).")
@click.option(
    "--output-len", type=int, metavar="TOKENS", help="Inference: generated tokens per request (default 1024)."
)
@click.option("--concurrency", type=int, metavar="N", help="Inference: requests in flight (default 128).")
@click.option("--rate", metavar="REQ/S", help="Inference: requests per second to size for (instead of --concurrency).")
@click.option("--diagram", is_flag=True, help="Draw the nodes and GPUs with TP/PP/DP groups.")
@click.option("--html", "html_file", metavar="FILE", type=OUTPUT_FILE, help=HTML_HELP)
@click.option(
    "--svg",
    "svg_file",
    metavar="FILE",
    type=OUTPUT_FILE,
    help="Also write the topology/groups picture (SVG) to FILE.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable output (keys tp, pp, dp, cp, ep, "
    "nodes, gpus_per_node, micro_batch, memory_per_gpu_gb, alternatives, ...).",
)
@exits((2, "cannot be planned (the reason and the smallest allocation that fits), or a usage or input error"))
def plan_cmd(
    spec_file: Optional[str],
    model_ref: Optional[str],
    params: Optional[str],
    site_name: Optional[str],
    partition: Optional[str],
    launcher: Optional[str],
    task: Optional[str],
    gpus: Optional[int],
    nodes: Optional[int],
    seq: Optional[int],
    global_batch: Optional[int],
    tokens: Optional[str],
    target_days: Optional[float],
    precision: Optional[str],
    optimizer: str,
    zero: Optional[int],
    recompute: Optional[str],
    tp: Optional[int],
    pp: Optional[int],
    dp: Optional[int],
    cp: Optional[int],
    ep: Optional[int],
    micro_batch: Optional[int],
    serve: Optional[str],
    input_len: Optional[int],
    output_len: Optional[int],
    concurrency: Optional[int],
    rate: Optional[str],
    diagram: bool,
    html_file: Optional[str],
    svg_file: Optional[str],
    as_json: bool,
) -> None:
    """Choose TP x PP x DP (x CP, x EP) and the node count for a model, and say why.

    Without --gpus/--nodes it finds the smallest allocation that fits. Pin any degree
    (--tp, --pp, ...) to have your layout checked and compared with the best one.
    In a repo with slurmgpu.yaml (or given a SPEC file) it plans that job, as `gen`
    would, with the site's sites.<name> block applied; flags override the spec.

    \b
    Examples:
      slurmgpu plan --model llama3-70b --nodes 4
      slurmgpu plan --model llama3-70b --nodes 2 --launcher megatron
      slurmgpu init --model llama3-70b --launcher megatron -y && slurmgpu plan slurmgpu.yaml --site perlmutter
      slurmgpu plan --model llama3-70b --task lora --nodes 2 --diagram
      slurmgpu plan --model llama3.1-405b --tokens 15T --target-days 60
      slurmgpu plan --params 13B --task finetune --site perlmutter --json
      slurmgpu plan --model llama3-70b --nodes 2 --task inference --tp 8 --pp 2
      slurmgpu plan --model llama3-70b --nodes 2 --task inference --html plan.html --svg plan.svg
      slurmgpu plan --model llama3-70b --task inference --serve disaggregated --input-len 4096 --output-len 512
    """
    from ..errors import PlanError
    from ..job import plan_request
    from ..plan import format_plan, make_plan
    from ..schema import parse_size

    if model_ref and params:
        raise click.UsageError("give --model NAME|FILE or --params SIZE (one of them)")
    if tokens is not None and parse_size(tokens) is None:
        raise PlanError("--tokens expects a count such as 15T, 2e12 or 300B, got %r" % tokens)
    root, spec, flags = _job_spec(
        None,
        dict(
            spec_file=spec_file,
            model=model_ref,
            partition=partition,
            launcher=launcher,
            task=task,
            gpus=gpus,
            nodes=nodes,
            seq=seq,
            global_batch=global_batch,
            tokens=tokens,
            precision=precision,
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            ep=ep,
            micro_batch=micro_batch,
            serve=serve,
            input_len=input_len,
            output_len=output_len,
            concurrency=concurrency,
            rate=rate,
        ),
        need_job=False,
    )
    site_obj = _load_site(site_name)
    spec = _spec_for_site(replace(spec, model=None) if params else spec, flags, site_obj, launch=False)
    if not params and not spec.model:
        if spec.source is None:
            raise SlurmgpuError(
                "give --model NAME|FILE or --params SIZE (no slurmgpu.yaml with `model:` found: %s)" % looked_in(root)
            )
        raise SlurmgpuError("give --model NAME|FILE or --params SIZE, or `model:` in %s" % spec.source)
    model = _plan_model(None if params else spec.model, params)
    req = plan_request(
        site_obj, spec, model, zero=zero, recompute=recompute, optimizer=optimizer, target_days=target_days
    )
    if launcher is None and spec.source is None:  # no launcher named anywhere: plan for any framework
        from ..plan import Capabilities

        req = replace(req, caps=Capabilities())
    if req.task == "inference":
        _plan_serving(site_obj, spec, model, as_json, html_file or svg_file, diagram)
        if spec.serve != "aggregated":
            return
        if spec.input_len or spec.output_len:  # the one server below at the request's context
            from ..job.sizing import workload

            req = replace(req, seq=req.seq or workload(spec).context)
    plan = make_plan(site_obj, req)
    if html_file or svg_file:
        plan_view(site_obj, plan, html_file, svg_file)
    if as_json:
        out = plan.to_dict()
        if diagram:
            from ..plan import render

            out["diagram"] = render(plan.layout, stage_layers=plan.stage_layers, segment=plan.segment)
        _emit_json(out)
        return
    click.echo(format_plan(plan, diagram=diagram))


def _plan_serving(site: Any, spec: Any, model: Any, as_json: bool, picture: Any, diagram: bool) -> None:
    """Inference: the serving modes compared for the request shape (and, for router and
    disaggregated, only that: the one-server plan below is the aggregated mode)."""
    from ..job import get_launcher
    from ..job.sizing import serve_plan
    from ..plan.serving import format_serve_plan

    launcher = get_launcher(spec.launcher)
    if not launcher.serving:
        launcher = get_launcher("vllm")  # one server's caps: vLLM's (DP replicas across nodes)
        spec = replace(spec, launcher="vllm")
    if spec.serve != "aggregated" and (picture or diagram):
        raise click.UsageError("--html, --svg and --diagram draw one server's layout: use them without --serve")
    sp = serve_plan(site, spec, model, launcher)
    if as_json:
        if spec.serve != "aggregated":
            _emit_json({"serving": sp.to_dict()})
        else:
            click.echo(format_serve_plan(sp), err=True)
        return
    click.echo(format_serve_plan(sp))
    if spec.serve == "aggregated":
        click.echo("")


def _plan_model(model_ref: Optional[str], params: Optional[str]) -> Any:
    """--model (catalogue, file, or a size) or --params."""
    from ..errors import ConfigError
    from ..plan import get_model, model_from_params
    from ..schema import parse_size

    if params:
        return model_from_params(params)
    assert model_ref is not None
    try:
        return get_model(model_ref)
    except ConfigError:
        if parse_size(model_ref) is not None and not os.path.exists(model_ref):
            return model_from_params(model_ref)
        raise
