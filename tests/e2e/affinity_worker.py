"""One rank of the affinity e2e job (tests/test_affinity_cluster.py): writes where it really runs.

Standard library only (it runs under the job's Python, also inside a chroot release)."""

import json
import os
import sys

out = sys.argv[sys.argv.index("--out") + 1]
rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
record = {
    "rank": rank,
    "local": int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))),
    "node": os.environ.get("SLURMD_NODENAME", ""),
    "cpus": sorted(os.sched_getaffinity(0)),
}
with open(os.path.join(out, "rank-%d.json" % rank), "w") as fh:
    json.dump(record, fh)
