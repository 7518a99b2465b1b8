#!/usr/bin/env bash
# Build (or check) another Slurm release for the test cluster: a minimal Debian chroot
# made with debootstrap from the Debian archive this machine's apt already uses, with
# slurmctld, slurmd, the clients, munge, Lua 5.1, the SPANK build headers and the Python
# packages a job needs to run slurmgpu.  contrib/testcluster/cluster.py runs that release's
# daemons and clients inside the chroot (see "Releases" there).
#
#   make-chroot.sh                # the releases the host is not: trixie (24.11) and forky
#                                 # (26.05) on bookworm (22.05), bookworm and forky on trixie;
#                                 # nothing to do when current
#   make-chroot.sh --suite trixie # one given suite: bookworm (Slurm 22.05), trixie (24.11),
#                                 # forky or sid (26.05)
#   make-chroot.sh --rebuild      # from scratch even when the cached one is current
#   make-chroot.sh --print-dir    # where the chroot is (or would be), then exit
#
# Cache: $SLURMGPU_CHROOT_CACHE/<suite> (default /var/cache/slurmgpu-testcluster/<suite>).
# A cached chroot whose stamp matches this script's package list is reused (well under a
# second); otherwise it is built from scratch into <dir>.new and renamed over <dir> at the
# end, so an interrupted build leaves nothing half-written under <dir>.
# Mirror: the URI the host's apt sources use for its own Debian suite (override with
# SLURMGPU_CHROOT_MIRROR); the security archive too when the host uses one (not for sid,
# which has none).  Several suites build one after the other, each under its own lock.
#
# Suites newer than the host's debootstrap: bookworm's debootstrap (1.0.128) has no script
# named forky; the script of sid (the one every Debian suite since bullseye links to) is
# passed instead, and the archive's InRelease for forky and sid is signed with the trixie
# key that bookworm's debian-archive-keyring (2023.3+deb12u2) already has.  When a
# future keyring is missing, debootstrap fails on the signature: install that release's
# debian-archive-keyring .deb from the archive (dpkg -i) and run this again.
#
# Protecting the host: everything runs in a private mount namespace (unshare -m), so any
# mount made by debootstrap or here (only /proc of the chroot) is gone when the script
# exits, also on failure, and is never visible in the host's /proc/mounts.  The chroot gets
# its own /dev nodes (mknod; the host's /dev is never bound in), its own munge key and
# /run/munge, and a policy-rc.d that stops package scripts from starting services.
# Run as root.
set -euo pipefail

FORMAT=1   # bump when the layout of the chroot changes: cached chroots are rebuilt
PACKAGES=(slurmctld slurmd slurm-client munge lua5.1 libslurm-dev liblua5.1-0-dev
          gcc make libc6-dev python3 python3-click python3-jinja2 python3-yaml python3-psutil)
CACHE=${SLURMGPU_CHROOT_CACHE:-/var/cache/slurmgpu-testcluster}
STAMP_NAME=.slurmgpu-testcluster-stamp

prog=make-chroot.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
log() { echo "$prog: $*" >&2; }

suites=()
rebuild=0
print_dir=0
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) [ $# -ge 2 ] || die "--suite needs a value (bookworm, trixie, forky or sid)"; suites+=("$2"); shift 2 ;;
        --suite=*) suites+=("${1#--suite=}"); shift ;;
        --rebuild) rebuild=1; shift ;;
        --print-dir) print_dir=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

host_codename() {
    local c=""
    if [ -r /etc/os-release ]; then
        # shellcheck disable=SC1091
        c=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    fi
    echo "$c"
}

host=$(host_codename)
if [ "${#suites[@]}" -eq 0 ]; then
    case "$host" in
        trixie) suites=(bookworm forky) ;;
        forky|sid) suites=(bookworm trixie) ;;
        *) suites=(trixie forky) ;;
    esac
fi
for suite in "${suites[@]}"; do
    case "$suite" in
        bookworm|trixie|forky|sid) ;;
        *) die "unsupported suite '$suite' (bookworm: Slurm 22.05, trixie: 24.11, forky or sid: 26.05)" ;;
    esac
done
if [ "${#suites[@]}" -gt 1 ]; then
    # One suite per run of this script (each with its own lock and namespace).
    [ "$print_dir" = 0 ] || { for suite in "${suites[@]}"; do echo "$CACHE/$suite"; done; exit 0; }
    extra=()
    [ "$rebuild" = 0 ] || extra+=(--rebuild)
    for suite in "${suites[@]}"; do
        "$BASH" "$0" --suite "$suite" "${extra[@]}" || exit $?
    done
    exit 0
fi
suite=${suites[0]}
dir="$CACHE/$suite"
if [ "$print_dir" = 1 ]; then
    echo "$dir"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot, mknod)"

# The Debian archive URI the host's apt uses for suite $1 (one-line .list and deb822
# .sources files); empty if none.
host_uri_for() {
    local want=$1 f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v want="$want" '
            /^[[:space:]]*deb[[:space:]]/ {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if ($(i + 1) == want) { print $i; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v want="$want" '
            function flush() {
                if (types ~ /(^|[[:space:]])deb([[:space:]]|$)/ && (" " suites " ") ~ (" " want " ")) {
                    split(uris, u, /[[:space:]]+/); print u[1]; found = 1; exit
                }
                types = ""; suites = ""; uris = ""
            }
            /^[[:space:]]*$/ { flush(); next }
            /^[[:space:]]*#/ { next }
            tolower($1) == "types:"  { $1 = ""; types = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 }
            tolower($1) == "uris:"   { $1 = ""; sub(/^[[:space:]]+/, ""); uris = $0 }
            END { if (!found) flush() }' "$f"
    done | head -n1
}

mirror=${SLURMGPU_CHROOT_MIRROR:-}
security=""
if [ -z "$mirror" ]; then
    [ -n "$host" ] || die "cannot tell this host's Debian suite (/etc/os-release): set SLURMGPU_CHROOT_MIRROR"
    mirror=$(host_uri_for "$host")
    [ -n "$mirror" ] || die "no Debian archive for '$host' in /etc/apt/sources.list*: set SLURMGPU_CHROOT_MIRROR"
    security=$(host_uri_for "$host-security")
fi
# sid has neither a security nor an updates suite.
updates=1
if [ "$suite" = sid ]; then
    security=""
    updates=0
fi
# The debootstrap script for the suite: its own, or sid's for a suite newer than this
# debootstrap (see the head of this file).
script_dir=/usr/share/debootstrap/scripts
bootstrap_script=()
if [ ! -e "$script_dir/$suite" ] && [ -e "$script_dir/sid" ]; then
    bootstrap_script=("$script_dir/sid")
fi

stamp_text() {
    printf 'format=%s\nsuite=%s\nmirror=%s\nsecurity=%s\npackages=%s\n' \
        "$FORMAT" "$suite" "$mirror" "$security" "${PACKAGES[*]}"
}

# A chroot is usable when its stamp matches and its /dev, daemons and headers are in place.
usable() {
    local d=$1 n
    [ -f "$d/$STAMP_NAME" ] || return 1
    [ "$(grep -v '^slurm_version=' "$d/$STAMP_NAME")" = "$(stamp_text)" ] || return 1
    for n in null zero full random urandom tty; do [ -c "$d/dev/$n" ] || return 1; done
    for n in usr/sbin/slurmctld usr/sbin/slurmd usr/bin/sbatch usr/sbin/munged usr/bin/python3 \
             usr/include/slurm/spank.h etc/munge/munge.key usr/sbin/policy-rc.d; do
        [ -e "$d/$n" ] || return 1
    done
}

mkdir -p "$CACHE"
if [ -z "${_SLURMGPU_CHROOT_INNER:-}" ]; then  # the inner run inherits the lock on fd 9
    exec 9>"$CACHE/.$suite.lock"
    flock -w 1800 9 || die "another make-chroot.sh holds $CACHE/.$suite.lock"
fi

if [ "$rebuild" = 0 ] && usable "$dir"; then
    log "$suite chroot is current: $dir ($(sed -n 's/^slurm_version=//p' "$dir/$STAMP_NAME"))"
    exit 0
fi

command -v debootstrap >/dev/null 2>&1 || die "debootstrap not installed (apt-get install debootstrap)"
command -v unshare >/dev/null 2>&1 || die "unshare (util-linux) not found"

if [ -z "${_SLURMGPU_CHROOT_INNER:-}" ]; then
    # Re-run in a private mount namespace: every mount made below dies with it.  The lock
    # (fd 9) is inherited.
    t0=$(date +%s)
    log "building the $suite chroot in $dir (mirror $mirror${security:+, security $security})"
    rc=0
    _SLURMGPU_CHROOT_INNER=1 unshare --mount --propagation private -- "$BASH" "$0" --suite "$suite" \
        --rebuild || rc=$?
    [ "$rc" -eq 0 ] || die "building the $suite chroot failed (exit $rc); $dir was not changed"
    log "$suite chroot built in $(( $(date +%s) - t0 )) s: $dir ($(sed -n 's/^slurm_version=//p' "$dir/$STAMP_NAME"))"
    exit 0
fi

# ---- from here on: inside the private mount namespace
new="$dir.new"
mounted=()
cleanup() {
    local m
    for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
# rm -rf of a chroot, refusing when anything is mounted below it (a bind mount of a host
# directory would be emptied through it); --one-file-system as a second guard.
safe_rm() {
    local d=$1
    [ -e "$d" ] || return 0
    if awk -v d="$d" '$2 == d || index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
        die "something is mounted below $d (see /proc/mounts): unmount it first"
    fi
    rm -rf --one-file-system "$d"
}
in_root() { chroot "$new" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
                DEBIAN_FRONTEND=noninteractive "$@"; }

safe_rm "$new"
mkdir -p "$new"
# A container marker would make debootstrap bind the host's device nodes in.
env -u CONTAINER debootstrap --variant=minbase "$suite" "$new" "$mirror" "${bootstrap_script[@]}" >"$CACHE/$suite.debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/$suite.debootstrap.log" >&2; die "debootstrap $suite failed (log: $CACHE/$suite.debootstrap.log)"; }

# Own device nodes, never the host's: (name major minor), all mode 0666.
for spec in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
    read -r name major minor <<<"$spec"
    node="$new/dev/$name"
    if [ ! -c "$node" ] || [ "$(stat -c '%t:%T' "$node")" != "$(printf '%x:%x' "$major" "$minor")" ]; then
        rm -rf "$node"
        mknod -m 0666 "$node" c "$major" "$minor"
    fi
    chmod 0666 "$node"
done

# No package script may start a service in the chroot.
printf '#!/bin/sh\n# slurmgpu test cluster: never start services in this chroot\nexit 101\n' \
    >"$new/usr/sbin/policy-rc.d"
chmod 0755 "$new/usr/sbin/policy-rc.d"

{
    echo "deb $mirror $suite main"
    [ "$updates" = 0 ] || echo "deb $mirror $suite-updates main"
    [ -z "$security" ] || echo "deb $security $suite-security main"
} >"$new/etc/apt/sources.list"
# testing and unstable Release files expire a week after they are signed; a mirror that
# serves a frozen copy of the archive (as the one this was first built against did) is
# refused by apt once that week is over.  The signature is still checked.
if [ "$suite" = forky ] || [ "$suite" = sid ]; then
    echo 'Acquire::Check-Valid-Until "false";' >"$new/etc/apt/apt.conf.d/99slurmgpu-no-valid-until"
fi

mount -t proc proc "$new/proc"
mounted+=("$new/proc")
in_root apt-get -q -o Acquire::Retries=3 update >"$CACHE/$suite.apt.log" 2>&1 \
    || { tail -n 20 "$CACHE/$suite.apt.log" >&2; die "apt-get update in the chroot failed"; }
in_root apt-get -q -y --no-install-recommends install "${PACKAGES[@]}" >>"$CACHE/$suite.apt.log" 2>&1 \
    || { tail -n 20 "$CACHE/$suite.apt.log" >&2; die "apt-get install in the chroot failed (log: $CACHE/$suite.apt.log)"; }
in_root apt-get clean

# The chroot's own munge key (the package makes one; make sure, and never the host's).
if [ ! -s "$new/etc/munge/munge.key" ] || { [ -f /etc/munge/munge.key ] && cmp -s /etc/munge/munge.key "$new/etc/munge/munge.key"; }; then
    rm -f "$new/etc/munge/munge.key"
    in_root mungekey --create --keyfile /etc/munge/munge.key
fi
in_root chown munge:munge /etc/munge/munge.key
in_root chmod 0400 /etc/munge/munge.key
in_root install -d -o munge -g munge -m 0755 /run/munge

umount "$new/proc"
mounted=()
for n in null zero full random urandom tty; do
    [ -c "$new/dev/$n" ] || die "$new/dev/$n is not a character device after the install"
done
version=$(chroot "$new" /usr/sbin/slurmctld -V) || die "slurmctld -V fails in the chroot"
{ stamp_text; echo "slurm_version=${version#slurm-wlm }"; } >"$new/$STAMP_NAME"
usable "$new" || die "the new chroot misses something (see usable() in $0)"

if [ -e "$dir" ]; then
    safe_rm "$dir.old"
    mv "$dir" "$dir.old"
fi
mv "$new" "$dir"
safe_rm "$dir.old"
