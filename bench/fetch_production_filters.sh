#!/bin/sh
# Fetch the three production job_submit.lua filters that `bench/submit_bench.py --production DIR`
# compares slurmgpu with, at pinned commits, into DIR/<name>/, and check them by sha256 (the
# bench adapts them by exact text replacement, see PRODUCTION in submit_bench.py). They are other
# projects' code: fetched at bench time, never committed here.
#
#   sh bench/fetch_production_filters.sh /tmp/production-filters
#   python bench/submit_bench.py --production /tmp/production-filters --mix
#
# Without network access: copy the same files into DIR/<name>/ by other means (a git checkout of
# each repository at the commit below); the bench checks the same sha256.
set -eu

dir=${1:?usage: fetch_production_filters.sh DIR}
gh=https://raw.githubusercontent.com

fetch() { # name, url, file, sha256
    mkdir -p "$dir/$1"
    curl -fsSL --retry 3 -o "$dir/$1/$3" "$2"
    echo "$4  $dir/$1/$3" | sha256sum -c -
}

# SchedMD's example filter, contribs/lua/job_submit.lua (unchanged since 2019)
fetch schedmd "$gh/SchedMD/slurm/6d5fdc78cae2cb6de415ffef910704ff3a05461e/contribs/lua/job_submit.lua" \
    job_submit.lua ff0e5f3329f03833ae56e8b00a0cc6cc9073319b74987153d35766d1c291b2f0
# DTU Niflheim's filter (Ole Holm Nielsen), plugins/job_submit.lua, 2025-09-09
fetch niflheim "$gh/OleHolmNielsen/Slurm_tools/a033fcea4b64f0a3104dbdaaa4486a893a2196f1/plugins/job_submit.lua" \
    job_submit.lua bb157c865941dbd7befce32d8daf0368ecf3ab1ee790b41f70c36fc96cc8e7d0
# UNL Holland Computing Center's filter and its utility module
fetch unl "$gh/unlhcc/slurm-job_submit/ee89d8216e3099f43058ff6ac77ef94c7ac176cd/job_submit.lua" \
    job_submit.lua c2c3fbb7870913c1536711982f9868fc973ddae9da7a82dca63119e88f1371d0
fetch unl "$gh/unlhcc/slurm-job_submit/ee89d8216e3099f43058ff6ac77ef94c7ac176cd/job_submit_utils.lua" \
    job_submit_utils.lua bba9f0a0b5cdd88620a8e7fe6bd5b98f3e13a71e601e204baff37e28ad3b244b
