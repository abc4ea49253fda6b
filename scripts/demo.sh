#!/usr/bin/env bash
# make demo: on a fresh machine, install what is missing, bring the local cluster up, run the
# three modes of the seed experiment on it, and print the result tables.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
# The `local` site ships with the testbed, not with slurm-ab.
export SLURM_AB_SITES="$PWD/testbed/sites${SLURM_AB_SITES:+:$SLURM_AB_SITES}"

make setup PY="$PY"        # a quick no-op when already done
make cluster-up PY="$PY"

stamp=$(date +%Y%m%d-%H%M%S)
declare -A run
for mode in tp32 pp8 tp32-dflash; do
  run[$mode]="demo-$mode-$stamp"
  echo "==> $mode"
  "$PY" -m slurm_ab submit "$mode" --site local --run-id "${run[$mode]}" --wait || echo "==> $mode: not ok (see above)"
done

echo
echo "==> results (results/<RUN_ID>/summary.md for each run)"
"$PY" -m slurm_ab report "${run[tp32]}" "${run[pp8]}" "${run[tp32-dflash]}"
echo "==> TP32 vs TP32 + DFlash"
"$PY" -m slurm_ab compare "${run[tp32]}" "${run[tp32-dflash]}"
