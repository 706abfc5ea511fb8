#!/usr/bin/env bash
# GPU placement from the command line, without a GPU: sluice-launch exports each worker's
# local rank (SLUICE_LOCAL_RANK) and no ps task gets one; sluice-train refuses a malformed
# local rank naming the variable when it needs a GPU (backend cuda), ignores the variables
# when backend auto finds no GPU, and checks --device. (sluice/cuda.h; test_device_choice
# has the choice itself.)
set -u
. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-launch sluice-train
sl_workdir gpu
PB=$(sl_port_base 28005) # blocks 28000..31999, offsets 5..7

# 1. sluice-launch: worker I gets SLUICE_LOCAL_RANK=I, ps tasks none
"$BIN/sluice-launch" -n 2 --ps 1 --port-base "$PB" -- sh -c 'echo "local=${SLUICE_LOCAL_RANK-unset}"' >"$T/l.out" 2>"$T/l.err"
rc=$?
[ $rc -eq 0 ] || fail "launch exited $rc: $(cat "$T/l.err")"
grep -qx "\[worker 0\] local=0" "$T/l.out" && grep -qx "\[worker 1\] local=1" "$T/l.out" &&
    grep -qx "\[ps 0\] local=unset" "$T/l.out" && ok "sluice-launch exports SLUICE_LOCAL_RANK to workers" ||
    fail "local ranks: $(cat "$T/l.out")"

# a config whose data never has to be read: sluice-train stops before the pipeline runs
cat >"$T/c.sl" <<'CFG'
pipeline p {
    files "nothing-*.tfrecord"
    batch 4
}
model m {
    input 4
    dense 2
}
train {
    model m
    data p
    run_dir "run"
}
CFG
cd "$T" || exit 1

# 2. backend cuda with a malformed local rank: the variable is named
SLUICE_LOCAL_RANK=abc "$BIN/sluice-train" c.sl --backend cuda >o 2>e
rc=$?
[ $rc -eq 1 ] && grep -q "replica 0: choosing a GPU: SLUICE_LOCAL_RANK='abc' is not a local rank (a whole number 0..65535)" e &&
    ok "malformed SLUICE_LOCAL_RANK named" || fail "bad local rank: rc $rc: $(cat e)"
SLURM_LOCALID=-3 "$BIN/sluice-train" c.sl --backend cuda --device 0 >o 2>e
grep -q "SLURM_LOCALID" e && fail "--device should win over SLURM_LOCALID: $(cat e)" || ok "--device wins over the variables"

# 3. --device out of range is a usage error
"$BIN/sluice-train" c.sl --device -1 >o 2>e
rc=$?
[ $rc -eq 2 ] && grep -q -- "--device" e && ok "--device -1 refused" || fail "--device -1: rc $rc: $(cat e)"

# 4. backend auto without a GPU: the variables are not looked at
SLUICE_LOCAL_RANK=abc "$BIN/sluice-train" c.sl >o 2>e
grep -q "SLUICE_LOCAL_RANK" e && fail "auto without a GPU read SLUICE_LOCAL_RANK: $(cat e)" || ok "auto without a GPU ignores the local rank"
if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "PASS: test_gpu_placement"
