"""Site files to `Site`: the field tables, `extends:` and the resolution order (--site, $SLURMGPU_SITE,
/etc, ~/.config, built-in). Every problem is reported at once as file:line:col: field: message."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError, Issue
from ..schema import Checker, Field, join
from ..vocab import FABRICS, LAUNCHERS, RUNTIMES
from .affinity import parse_affinity
from .model import (
    GPU_REQUESTS,
    LINKS,
    MNNVL_MODES,
    NODE_RANK_ORDERS,
    POLICY_MODES,
    SCRIPT_CHECKS,
    TOPOLOGIES,
    VENDORS,
    Container,
    Nic,
    NodeType,
    Partition,
    Site,
    SitePolicy,
    SitePreflight,
    SiteRequeue,
)
from .presets import preset_dir, preset_names, site_search

_SITE_FIELDS = {
    "name": Field("str"),
    "description": Field("str", default=""),
    "extends": Field("str"),
    "slurm_version": Field("str"),
    "default_partition": Field("str"),
    "account": Field("str"),
    "qos": Field("str"),
    "gpu_request": Field("str", default="gpus-per-node", choices=GPU_REQUESTS),
    "topology": Field("str", default="flat", choices=TOPOLOGIES),
    # node-rank order (plan/placement.py): default from slurm_version (26.05: tasks-block)
    "node_rank_order": Field("str", choices=NODE_RANK_ORDERS),
    "blocks_follow_names": Field("bool", default=True),
    "partitions": Field("map", required=True),
    "node_types": Field("map", required=True),
    "container": Field("map"),
    "paths": Field("map"),
    "policy": Field("map"),
    "preflight": Field("map"),
    "requeue": Field("map"),
}


_PARTITION_FIELDS = {
    "node_type": Field("str", required=True),
    "nodes": Field("int", required=True, positive=True),
    "max_nodes_per_job": Field("int", positive=True),
    "constraint": Field("str"),
    "exclusive": Field("bool", default=True),
    "policy": Field("str", choices=POLICY_MODES),
    "leaf_switches": Field("strmap", default=dict),
}


_NODE_FIELDS = {
    "gpus": Field("int", required=True, positive=True),
    "gpu_model": Field("str", required=True),
    "gres_type": Field("str"),
    "vendor": Field("str", default="nvidia", choices=VENDORS),
    "gpu_memory_gb": Field("num", required=True, positive=True),
    "bf16_tflops": Field("num", required=True, positive=True),
    "link": Field("str", required=True, choices=LINKS),
    "link_gbs": Field("num", required=True, positive=True),
    "nvlink_domain": Field("int", positive=True),
    "cpus": Field("int", required=True, positive=True),
    "memory_gb": Field("num", required=True, positive=True),
    "fabric": Field("str", required=True, choices=FABRICS),
    "nics": Field("list", default=list),
    "socket_ifname": Field("str"),
    "env": Field("strmap", default=dict),
    "roce_gid_index": Field("int", minimum=0),
    "roce_traffic_class": Field("int", minimum=0),
    "mnnvl": Field("str", default="auto", choices=MNNVL_MODES),
    "affinity": Field("map"),  # GPU -> NUMA node, CPUs, NICs (site/affinity.py)
    "imex_per_segment": Field("bool", default=False),
}


_NIC_FIELDS = {
    "name": Field("str", required=True),
    "port": Field("int", default=1, positive=True),
    "link_layer": Field("str", default="infiniband", choices=("infiniband", "ethernet")),
    "gbps": Field("num", required=True, positive=True),
    "role": Field("str", default="compute", choices=("compute", "storage")),
}


_CONTAINER_FIELDS = {
    "runtime": Field("str", default="none", choices=RUNTIMES),
    "image": Field("str"),
    "mounts": Field("strlist", default=tuple),
}


_PATH_FIELDS = {
    "scratch": Field("str"),
    "checkpoint": Field("str"),
    "templates": Field("str"),
    "runs": Field("str"),
    "calibration": Field("str"),
}


_PREFLIGHT_FIELDS = {
    "min_bandwidth_fraction": Field("num", default=SitePreflight.min_bandwidth_fraction, positive=True),
    "min_free_gb": Field("num", default=SitePreflight.min_free_gb, minimum=0),
}


_REQUEUE_FIELDS = {
    "kill_wait": Field("int", default=SiteRequeue.kill_wait, minimum=0),
    "checkpoint_gbps": Field("num", positive=True),
    "expedite": Field("bool", default=False),
}


_POLICY_FIELDS = {
    "mode": Field("str", default="enforce", choices=POLICY_MODES),
    "launchers": Field("strmap", default=dict),
    "exempt_users": Field("strlist", default=tuple),
    "exempt_accounts": Field("strlist", default=tuple),
    "exempt_qos": Field("strlist", default=tuple),
    # the cluster's AccountingStorageEnforce words: -A/--qos exemptions count only if Slurm
    # validates them (associations / qos); `admin install` checks them against slurm.conf
    "accounting_enforce": Field("strlist", default=tuple),
    "on_internal_error": Field("str", default="accept", choices=("accept", "reject")),
    "groups": Field("strmap", default=dict),
    "repair_segment": Field("bool", default=False),
    "unbound_ranks": Field("str", default="auto", choices=("auto", "warn", "off")),  # rule_binding.lua
    "single_node_log_s": Field("int", default=SitePolicy.single_node_log_s, minimum=0),  # job_submit_adapter.lua
    # job_submit_adapter.lua (deferred), spank_adapter.lua (the batch step): docs/admin-filter.md
    "script_check": Field("str", default=SitePolicy.script_check, choices=SCRIPT_CHECKS),
}


GROUP_KINDS = ("tp", "cp", "ep")  # groups that must stay inside one NVLink domain (plan/placement.py)
# job_desc.segment_size writable in job_submit/lua: 25.11.2 (a backport; 25.11.0 and 25.11.1
# drop the write) and every 26.05
SEGMENT_WRITABLE_FROM = (25, 11, 2)
# sbatch --requeue=expedite and --network=unique-channel-per-segment; TopologyParam=BlockAsNodeRank
SLURM_25_11 = (25, 11, 0)
# step tasks distributed in topology order by default
SLURM_26_05 = (26, 5, 0)


def default_node_rank_order(slurm_version: Optional[str], topology: str) -> str:
    """What Slurm does without TopologyParam/SelectTypeParameters saying otherwise: 26.05 puts a
    step's tasks in topology order when a topology plugin is configured; earlier releases use the
    node names."""
    ver = _version_tuple(slurm_version)
    return "tasks-block" if topology == "block" and ver and ver >= SLURM_26_05 else "name"


def _version_tuple(v: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """ "25.11.2" -> (25, 11, 2); "25.11" -> (25, 11, 0): a release named without its patch
    level is taken as its first one (so a fact that arrived in a patch release is not assumed)."""
    parts = str(v or "").split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0, int(parts[2]) if len(parts) > 2 else 0
    except ValueError:
        return None


def _resolve_extends(ref: str, child_file: str) -> str:
    """`extends:` names a preset or a path relative to the file that says it."""
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        p = Path(ref)
        if not p.is_absolute():
            p = Path(child_file).resolve().parent / p
        return str(p)
    return str(preset_dir() / (ref + ".yaml"))


def _replaced_whole(key: str, base: Any, override: Any) -> bool:
    """An affinity map and `unknown: WHY` exclude each other: a site that extends a preset says one
    or the other for its nodes, and neither half of the preset's survives into it."""
    if key != "affinity" or not isinstance(base, dict) or not isinstance(override, dict):
        return False
    return "unknown" in override or "unknown" in base


def _load_raw(path: str, seen: Tuple[str, ...] = ()) -> Any:
    from ..yamlsrc import deep_merge, load_yaml_file

    data = load_yaml_file(path)
    if data is None:
        raise ConfigError([Issue(path, None, None, "", "file is empty; expected a site config mapping")])
    if not isinstance(data, dict):
        raise ConfigError([Issue(path, 1, 1, "", "expected a mapping at the top level of a site config")])
    ref = data.get("extends")
    if ref is None:
        return data
    loc = data.locs.get("extends") if hasattr(data, "locs") else None
    at: Tuple[str, Optional[int], Optional[int]] = loc or (path, None, None)
    if not isinstance(ref, str):
        raise ConfigError([Issue(*at, "extends", "expected a preset name or a path")])
    parent = _resolve_extends(ref, path)
    real = os.path.realpath(parent)
    if real in seen or real == os.path.realpath(path):
        raise ConfigError([Issue(*at, "extends", "circular 'extends' through %s" % parent)])
    if not os.path.exists(parent):
        hint = "; presets: %s" % ", ".join(preset_names()) if "/" not in ref else ""
        raise ConfigError([Issue(*at, "extends", "no such site '%s' (looked for %s)%s" % (ref, parent, hint))])
    base = _load_raw(parent, seen + (os.path.realpath(path),))
    merged = deep_merge(base, data, _replaced_whole)
    if "name" not in data:  # a derived site is not the preset it starts from
        merged["name"] = Path(path).stem
    del merged["extends"]
    return merged


def load_site(path: str) -> Site:
    """Load and validate a site config (following `extends:`)."""
    data = _load_raw(path)
    return site_from_data(data, path)


def site_from_data(data: Any, path: str) -> Site:
    ck = Checker(path)
    top = ck.take(data, _SITE_FIELDS, "")
    node_types: Dict[str, NodeType] = {}
    # None when missing, null or not a mapping: already reported, so no follow-on errors.
    nt_data = top["node_types"] if isinstance(top["node_types"], dict) else None
    for name, raw in (nt_data or {}).items():
        nt = _node_type(ck, str(name), raw, nt_data)
        if nt is not None:
            node_types[str(name)] = nt
    if nt_data is not None and not nt_data:
        ck.error(data, "node_types", "node_types", "at least one node type is needed")

    partitions: Dict[str, Partition] = {}
    p_data = top["partitions"] if isinstance(top["partitions"], dict) else None
    for name, raw in (p_data or {}).items():
        p = _partition(ck, str(name), raw, p_data, node_types, nt_data)
        if p is not None:
            partitions[str(name)] = p
    if p_data is not None and not p_data:
        ck.error(data, "partitions", "partitions", "at least one partition is needed")

    if isinstance(data.get("slurm_version"), float):  # 23.10 would silently become "23.1"
        ck.error(
            data,
            "slurm_version",
            "slurm_version",
            'write the version in quotes, e.g. "23.11"; '
            "unquoted, YAML reads it as the number %r" % data["slurm_version"],
        )
    # checked against what the file declares, not only what loaded cleanly: a partition or node
    # type with its own error must not hide these (every independent error in one run)
    declared = [str(n) for n in (p_data or {})]
    default = top["default_partition"]
    if default is None and partitions:
        default = next(iter(partitions))
    elif default is not None and declared and default not in declared:
        ck.error(
            data,
            "default_partition",
            "default_partition",
            "no partition named '%s' (defined: %s)" % (default, ", ".join(declared)),
        )

    for praw in (p_data or {}).values():
        nt_name = praw.get("node_type") if isinstance(praw, dict) else None
        nt_raw = (nt_data or {}).get(nt_name) if isinstance(nt_name, str) else None
        gpus = nt_raw.get("gpus") if isinstance(nt_raw, dict) else None
        domain = nt_raw.get("nvlink_domain") if isinstance(nt_raw, dict) else None
        reported = {i.path for i in ck.issues}  # a domain already found wrong is not judged again here
        if any("node_types.%s.%s" % (nt_name, k) in reported for k in ("gpus", "nvlink_domain", "link")):
            continue
        if not (isinstance(gpus, int) and isinstance(domain, int)) or isinstance(gpus, bool) or gpus <= 0:
            continue
        if domain > gpus and top["topology"] != "block":
            ck.error(
                data,
                "topology",
                "topology",
                "node type '%s' has an NVLink domain of %d GPUs across %d nodes; set topology: block "
                "so jobs can ask to stay inside one domain (--segment)" % (nt_name, domain, domain // gpus),
            )
            break

    container = ck.take(top["container"], _CONTAINER_FIELDS, "container", data, "container")
    paths = ck.take(top["paths"], _PATH_FIELDS, "paths", data, "paths")
    pol = ck.take(top["policy"], _POLICY_FIELDS, "policy", data, "policy")
    pre = ck.take(top["preflight"], _PREFLIGHT_FIELDS, "preflight", data, "preflight")
    rq = ck.take(top["requeue"], _REQUEUE_FIELDS, "requeue", data, "requeue")
    if isinstance(pre["min_bandwidth_fraction"], (int, float)) and pre["min_bandwidth_fraction"] > 1:
        ck.error(
            data.get("preflight"),
            "min_bandwidth_fraction",
            "preflight.min_bandwidth_fraction",
            "a share of the expected bandwidth: between 0 and 1, got %r" % pre["min_bandwidth_fraction"],
        )
    pol_raw = data.get("policy") if isinstance(data, dict) else None
    for launcher, mode in (pol["launchers"] or {}).items():
        lp = join("policy.launchers", launcher)
        src = pol_raw.get("launchers") if isinstance(pol_raw, dict) else None
        if launcher not in LAUNCHERS:
            ck.error(src, launcher, lp, "unknown launcher; expected one of: %s" % ", ".join(LAUNCHERS))
        if mode not in POLICY_MODES:
            ck.error(src, launcher, lp, "must be one of %s, got %r" % (", ".join(POLICY_MODES), mode))
    for kind, mode in (pol["groups"] or {}).items():
        src = pol_raw.get("groups") if isinstance(pol_raw, dict) else None
        if kind not in GROUP_KINDS:
            ck.error(
                src,
                kind,
                join("policy.groups", kind),
                "unknown group kind; expected one of: %s" % ", ".join(GROUP_KINDS),
            )
        elif mode not in POLICY_MODES:
            ck.error(
                src, kind, join("policy.groups", kind), "must be one of %s, got %r" % (", ".join(POLICY_MODES), mode)
            )
    ver_words = top["slurm_version"] or "not set"
    order = top["node_rank_order"] or default_node_rank_order(top["slurm_version"], top["topology"])
    need = {"block": (SLURM_25_11, "TopologyParam=BlockAsNodeRank"), "tasks-block": (SLURM_26_05, "Slurm 26.05")}
    if top["node_rank_order"] in need:
        least, what = need[top["node_rank_order"]]
        if (_version_tuple(top["slurm_version"]) or (0, 0, 0)) < least:
            ck.error(
                data,
                "node_rank_order",
                "node_rank_order",
                "%s needs Slurm %d.%02d or later (%s); slurm_version is %s"
                % (top["node_rank_order"], least[0], least[1], what, ver_words),
            )
    if rq["expedite"] and (_version_tuple(top["slurm_version"]) or (0, 0, 0)) < SLURM_25_11:
        ck.error(
            data.get("requeue") if isinstance(data, dict) else None,
            "expedite",
            "requeue.expedite",
            "--requeue=expedite needs Slurm 25.11 or later (and SlurmctldParameters=enable_expedited_requeue); "
            "slurm_version is %s" % ver_words,
        )
    for nt in node_types.values():
        if not nt.imex_per_segment:
            continue
        where = join("node_types", nt.name) + ".imex_per_segment"
        raw_nt = (data.get("node_types") or {}).get(nt.name) if isinstance(data, dict) else None
        if not nt.multi_node_nvlink or nt.mnnvl == "off":
            ck.error(
                raw_nt,
                "imex_per_segment",
                where,
                "IMEX channels serve NVLink domains larger than a node with IMEX running (mnnvl on or auto)",
            )
        elif (_version_tuple(top["slurm_version"]) or (0, 0, 0)) < SLURM_25_11 or top["topology"] != "block":
            ck.error(
                raw_nt,
                "imex_per_segment",
                where,
                "one IMEX channel per segment (--network=unique-channel-per-segment) needs Slurm 25.11 or later "
                "and topology: block; slurm_version is %s, topology %s" % (ver_words, top["topology"]),
            )
    if pol["repair_segment"]:
        ver = _version_tuple(top["slurm_version"])
        if ver is None or ver < SEGMENT_WRITABLE_FROM:
            ck.error(
                pol_raw,
                "repair_segment",
                "policy.repair_segment",
                "job_submit.lua may write job_desc.segment_size only from Slurm 25.11.2 (25.11.0 and 25.11.1 "
                'drop the write); slurm_version is %s (set slurm_version: "25.11.2", "26.05" or later, with the '
                "patch level for 25.11, or leave repair_segment off: jobs without --segment are rejected with "
                "the exact --segment to add)" % (top["slurm_version"] or "not set"),
            )
    ck.raise_if_any()

    name = top["name"] or Path(path).stem
    tdir = paths["templates"]
    if tdir and not os.path.isabs(tdir):
        tdir = str(Path(path).resolve().parent / tdir)
    return Site(
        name=name,
        description=top["description"] or "",
        source=path,
        default_partition=default,
        partitions=partitions,
        node_types=node_types,
        slurm_version=top["slurm_version"],
        account=top["account"],
        qos=top["qos"],
        gpu_request=top["gpu_request"],
        topology=top["topology"],
        node_rank_order=order,
        blocks_follow_names=bool(top["blocks_follow_names"]),
        container=Container(
            runtime=container["runtime"], image=container["image"], mounts=tuple(container["mounts"] or ())
        ),
        scratch=paths["scratch"],
        checkpoint_dir=paths["checkpoint"],
        template_dir=tdir,
        policy=SitePolicy(
            mode=pol["mode"],
            launchers=dict(pol["launchers"] or {}),
            exempt_users=tuple(pol["exempt_users"] or ()),
            exempt_accounts=tuple(pol["exempt_accounts"] or ()),
            exempt_qos=tuple(pol["exempt_qos"] or ()),
            accounting_enforce=tuple(x.strip().lower() for x in (pol["accounting_enforce"] or ())),
            on_internal_error=pol["on_internal_error"],
            groups=dict(pol["groups"] or {}),
            repair_segment=bool(pol["repair_segment"]),
            unbound_ranks=pol["unbound_ranks"],
            single_node_log_s=int(pol["single_node_log_s"]),
            script_check=pol["script_check"],
        ),
        preflight=SitePreflight(
            min_bandwidth_fraction=float(pre["min_bandwidth_fraction"]), min_free_gb=float(pre["min_free_gb"])
        ),
        requeue=SiteRequeue(
            kill_wait=int(rq["kill_wait"]),
            checkpoint_gbps=float(rq["checkpoint_gbps"]) if rq["checkpoint_gbps"] is not None else None,
            expedite=bool(rq["expedite"]),
        ),
        runs_file=paths["runs"],
        calibration_file=paths["calibration"],
    )


def _node_type(ck: Checker, name: str, raw: Any, parent: Any) -> Optional[NodeType]:
    path = join("node_types", name)
    n_before = len(ck.issues)
    v = ck.take(raw, _NODE_FIELDS, path, parent, name)
    nics: List[Nic] = []
    raw_nics = v["nics"] if isinstance(v["nics"], list) else []
    for i, item in enumerate(raw_nics):
        nv = ck.take(item, _NIC_FIELDS, join(path + ".nics", i), raw_nics, i)
        if nv["name"]:
            nics.append(
                Nic(
                    name=nv["name"],
                    port=nv["port"],
                    link_layer=nv["link_layer"],
                    gbps=float(nv["gbps"] or 0),
                    role=nv["role"],
                )
            )
    names = [n.name for n in nics]
    for i, n in enumerate(names):
        if names.index(n) != i:
            ck.error(raw_nics, i, join(path + ".nics", i), "NIC '%s' is listed twice" % n)
    gpus = v["gpus"]
    if len(ck.issues) > n_before or not isinstance(gpus, int) or gpus <= 0:
        return None
    domain = v["nvlink_domain"]
    if domain is None:
        domain = 1 if v["link"] == "pcie" else gpus
    if domain > gpus and domain % gpus:
        ck.error(
            raw,
            "nvlink_domain",
            path + ".nvlink_domain",
            "an NVLink domain larger than a node must be a whole number of nodes: %d is not a multiple of "
            "%d GPUs per node (e.g. GB200 NVL72: 72 = 18 trays x 4)" % (domain, gpus),
        )
    elif domain < gpus and gpus % domain:
        ck.error(
            raw,
            "nvlink_domain",
            path + ".nvlink_domain",
            "an NVLink domain smaller than a node must divide its %d GPUs, got %d" % (gpus, domain),
        )
    if v["mnnvl"] != "auto" and domain <= gpus:
        ck.error(
            raw,
            "mnnvl",
            path + ".mnnvl",
            "mnnvl: %s applies to NVLink domains larger than a node (nvlink_domain %d on %d-GPU nodes); "
            "remove it or set nvlink_domain (e.g. 72 for GB200/GB300 NVL72)" % (v["mnnvl"], domain, gpus),
        )
    if v["link"] == "pcie" and domain > gpus:
        ck.error(
            raw,
            "nvlink_domain",
            path + ".nvlink_domain",
            "link: pcie cannot form a multi-node NVLink domain (got %d GPUs)" % domain,
        )
    fabric = v["fabric"]
    compute = [n for n in nics if n.role == "compute"]
    if fabric == "infiniband" and any(n.link_layer != "infiniband" for n in compute):
        ck.error(raw, "nics", path + ".nics", "fabric infiniband needs compute NICs with link_layer: infiniband")
    if fabric == "roce" and any(n.link_layer != "ethernet" for n in compute):
        ck.error(
            raw, "nics", path + ".nics", "fabric roce (RDMA over Ethernet) needs compute NICs with link_layer: ethernet"
        )
    if fabric in ("infiniband", "roce", "efa") and not compute:
        ck.error(
            raw,
            "nics",
            path + ".nics",
            "fabric %s needs at least one compute NIC (name, gbps) so NCCL can be pointed at it" % fabric,
        )
    if fabric in ("slingshot", "ethernet") and not v["socket_ifname"]:
        ck.error(
            raw,
            None,
            path + ".socket_ifname",
            "fabric %s needs socket_ifname (the interface NCCL should use, e.g. hsn0 or eth0)" % fabric,
        )
    affinity = parse_affinity(ck, v["affinity"], path + ".affinity", raw, gpus, [n.name for n in nics])
    if len(ck.issues) > n_before:
        return None
    return NodeType(
        name=name,
        gpus=gpus,
        gpu_model=v["gpu_model"],
        vendor=v["vendor"],
        gpu_memory_gb=float(v["gpu_memory_gb"]),
        bf16_tflops=float(v["bf16_tflops"]),
        link=v["link"],
        link_gbs=float(v["link_gbs"]),
        nvlink_domain=domain,
        cpus=v["cpus"],
        memory_gb=float(v["memory_gb"]),
        fabric=fabric,
        nics=tuple(nics),
        socket_ifname=v["socket_ifname"],
        gres_type=v["gres_type"],
        env=dict(v["env"] or {}),
        roce_gid_index=v["roce_gid_index"],
        roce_traffic_class=v["roce_traffic_class"],
        mnnvl=v["mnnvl"],
        affinity=affinity,
        imex_per_segment=bool(v["imex_per_segment"]),
    )


def _partition(
    ck: Checker, name: str, raw: Any, parent: Any, node_types: Dict[str, NodeType], nt_data: Any
) -> Optional[Partition]:
    path = join("partitions", name)
    n_before = len(ck.issues)
    v = ck.take(raw, _PARTITION_FIELDS, path, parent, name)
    nt = v["node_type"]
    known = [str(k) for k in nt_data] if isinstance(nt_data, dict) else None
    if nt is not None and known is not None and nt not in known:
        import difflib

        hint = difflib.get_close_matches(nt, known, n=1)
        ck.error(
            raw,
            "node_type",
            path + ".node_type",
            "unknown node type '%s'%s (defined: %s)"
            % (nt, " (did you mean '%s'?)" % hint[0] if hint else "", ", ".join(known) or "none"),
        )
    maxn = v["max_nodes_per_job"]
    if maxn is None:
        maxn = v["nodes"]
    elif isinstance(v["nodes"], int) and maxn > v["nodes"]:
        ck.error(
            raw,
            "max_nodes_per_job",
            path + ".max_nodes_per_job",
            "max_nodes_per_job (%d) exceeds the partition's %d nodes" % (maxn, v["nodes"]),
        )
    leaves = _leaf_switches(ck, raw, path, v["leaf_switches"] or {}, v["nodes"])
    if len(ck.issues) > n_before:
        return None
    return Partition(
        name=name,
        node_type=nt,
        nodes=v["nodes"],
        max_nodes_per_job=maxn,
        constraint=v["constraint"],
        exclusive=v["exclusive"],
        policy=v["policy"],
        leaf_switches=leaves,
    )


def _leaf_switches(
    ck: Checker, raw: Any, path: str, given: Mapping[str, str], nodes: Any
) -> Dict[str, Tuple[str, ...]]:
    """partitions.X.leaf_switches: switch name -> Slurm host list, each node under one leaf."""
    from ..slurm.parse import parse_hostlist

    src = raw.get("leaf_switches") if isinstance(raw, dict) else None
    out: Dict[str, Tuple[str, ...]] = {}
    seen: Dict[str, str] = {}
    for leaf, hosts in given.items():
        where = join(path + ".leaf_switches", leaf)
        try:
            members = tuple(parse_hostlist(str(hosts)))
            odd = [m for m in members if any(c in m for c in "[] \t")]
            if odd:
                raise ValueError("unbalanced brackets or blanks in %r" % odd[0])
        except Exception as exc:  # SlurmError: a bad range
            ck.error(src, leaf, where, "not a Slurm host list (e.g. gb[001-018]): %s" % exc)
            continue
        if not members:
            ck.error(src, leaf, where, "no nodes: give the nodes under this leaf switch, e.g. gb[001-018]")
            continue
        for n in members:
            if n in seen:
                ck.error(src, leaf, where, "node %s is already under leaf switch %s" % (n, seen[n]))
                break
            seen[n] = leaf
        out[str(leaf)] = members
    if isinstance(nodes, int) and len(seen) > nodes:
        ck.error(
            raw,
            "leaf_switches",
            path + ".leaf_switches",
            "the leaf switches list %d nodes but the partition has %d (nodes:)" % (len(seen), nodes),
        )
    return out


def resolve_site(explicit: Optional[str], environ: Mapping[str, str]) -> Tuple[Site, str]:
    """Load the site meant by the user; the string says which one was used and why."""
    from .calibration import attach

    path, why = site_search(explicit, environ)
    site, calibrated = attach(load_site(path), environ)
    return site, "slurmgpu: site %s (%s: %s)%s" % (site.name, why, path, "; " + calibrated if calibrated else "")
