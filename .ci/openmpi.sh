#!/usr/bin/env bash
# CI: Open MPI's mpirun for tests/io/test_export.py (the exported rankfile run by a real mpirun --rankfile with
# `placement bind`), and numactl/taskset for the binding. Debian's packages; no-op when mpirun is already there.
set -euo pipefail
if command -v mpirun >/dev/null 2>&1 && command -v numactl >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -o DPkg::Lock::Timeout=600 -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends \
  openmpi-bin numactl util-linux
