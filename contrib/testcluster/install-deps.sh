#!/usr/bin/env bash
# Install what the local Slurm test cluster (contrib/testcluster/cluster.py) and the
# Lua/shell checks need, from Debian's archive: Slurm daemons and clients (22.05 on
# Debian 12, 24.11 on Debian 13), munge, slurmdbd and MariaDB (accounting; never started as
# a service: the cluster runs its own), Lua 5.1 (the version Debian's slurmctld embeds),
# ShellCheck and luacheck (`make lint`), the Slurm/Lua headers for building plugins, and
# debootstrap, and headless Chromium with its driver (the explain view's browser tests); then
# build (or reuse) the chroots with the other Debian releases' Slurm (make-chroot.sh: trixie's
# 24.11 and forky's 26.05 on Debian 12), so the cluster tests run on 22.05, 24.11 and 26.05.
# SLURMGPU_CHROOT=0 skips the chroots (their tests are then skipped, or fail under
# SLURMGPU_REQUIRE_CLUSTER=1).  Run as root.  Idempotent: when everything is already installed
# and the cached chroots are current it changes nothing and does not touch the network.
set -euo pipefail

# slurmdbd + mariadb-server: the accounting cluster (TestCluster(accounting=True), native release only);
# chromium + chromium-driver: the explain view's browser tests
# g++: DeepSpeed's CPU job (tests/test_e2e_launchers.py) JIT-compiles its shared-memory comm op
# jq: the --help examples that pipe --json into it (tests/test_cli_examples.py runs every example)
PACKAGES=(slurmctld slurmd slurm-client munge lua5.1 shellcheck lua-check libslurm-dev liblua5.1-dev debootstrap
    chromium chromium-driver slurmdbd mariadb-server g++ jq)

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

for cmd in slurmctld slurmd sbatch munged lua5.1 shellcheck luacheck chromium chromedriver slurmdbd mariadbd \
    mariadb-install-db; do
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] \
        || die "$cmd is still missing after installation"
done
[ -f /usr/include/slurm/spank.h ] || die "/usr/include/slurm/spank.h missing (libslurm-dev)"
echo "install-deps.sh: ok ($(/usr/sbin/slurmctld -V))"

# The other Debian releases' Slurm, in cached chroots (only Debian hosts of the matrix have
# their counterparts in the same archive).
# shellcheck disable=SC1091  # /etc/os-release is the host's
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ "${SLURMGPU_CHROOT:-1}" = 0 ]; then
    echo "install-deps.sh: SLURMGPU_CHROOT=0: not building the other Slurm releases' chroots"
elif [ "$codename" = bookworm ] || [ "$codename" = trixie ]; then
    bash "$(dirname "$0")/make-chroot.sh" || die "building the other Slurm releases' chroots failed"
else
    echo "install-deps.sh: host is '${codename:-unknown}', not Debian 12/13: no chroots for other Slurm releases"
fi
