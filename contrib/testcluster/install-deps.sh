#!/usr/bin/env bash
# Install what the local Slurm test cluster (contrib/testcluster/cluster.py) and the
# Lua/shell checks need, from Debian's archive: Slurm 22.05 daemons and clients, munge,
# Lua 5.1 (the version bookworm's slurmctld embeds), shellcheck and luacheck (`make lint`),
# and the Slurm/Lua headers for building plugins.  Run as root.  Idempotent: when everything is already
# installed it changes nothing and does not touch the network.
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge lua5.1 shellcheck lua-check libslurm-dev liblua5.1-dev)

die() {
    echo "install-deps.sh: error: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it calls apt-get)"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian/Ubuntu only"

# Installed package names plus the virtual names they provide (liblua5.1-dev is
# provided by liblua5.1-0-dev), one per line.
# shellcheck disable=SC2016  # ${...} here is dpkg-query's format, not the shell's
installed=$(dpkg-query -W -f='${db:Status-Status} ${Package} ${Provides}\n' 2>/dev/null \
    | awk '$1 == "installed" { for (i = 2; i <= NF; i++) { sub(/,$/, "", $i); print $i } }')
missing=()
for pkg in "${PACKAGES[@]}"; do
    grep -qxF "$pkg" <<<"$installed" || missing+=("$pkg")
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps.sh: all packages already installed: ${PACKAGES[*]}"
else
    echo "install-deps.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Wait for another apt/dpkg run to release its lock instead of failing at once.
    apt_opts=(-o DPkg::Lock::Timeout=600 -q)
    apt-get "${apt_opts[@]}" update \
        || die "apt-get update failed (network or apt sources?)"
    apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" \
        || die "apt-get install ${missing[*]} failed"
fi

for cmd in slurmctld slurmd sbatch munged lua5.1 shellcheck luacheck; do
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] \
        || die "$cmd is still missing after installation"
done
[ -f /usr/include/slurm/spank.h ] || die "/usr/include/slurm/spank.h missing (libslurm-dev)"
echo "install-deps.sh: ok ($(/usr/sbin/slurmctld -V))"
