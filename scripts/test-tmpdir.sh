#!/usr/bin/env bash
# Prints the directory `make test` gives the suite as TMPDIR: Linux's shared-memory file system
# (/dev/shm, a tmpfs) when it is writable and has room, else nothing (the system default).
#
# Why: the tests' PostgreSQL clusters create and drop a database for nearly every test, and
# end-to-end tests copy migrated data directories. On a virtual disk each of those file-system
# operations costs CPU in the kernel: on the 2-core development machine a database cloned from
# the tests' template cost 180-370 ms of PostgreSQL CPU on disk and 17-20 ms on tmpfs
# (docs/performance.md, "The test suite"). The data is the tests' own and is removed as they
# pass (tmp_path_retention_policy = "failed").
#
# TEST_TMPDIR_MIN_MB: the room required (default 6144 MB; a whole run peaks far below).
set -euo pipefail
dir=/dev/shm
need=${TEST_TMPDIR_MIN_MB:-6144}
[[ -d $dir && -w $dir ]] || exit 0
[[ $(stat -f -c %T "$dir" 2>/dev/null) == tmpfs ]] || exit 0
free=$(df -Pm "$dir" | awk 'NR == 2 {print $4}')
[[ -n $free && $free -ge $need ]] || exit 0
echo "$dir"
