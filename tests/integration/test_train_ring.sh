#!/usr/bin/env bash
# `strategy ring` end to end: 2 replicas (sluice-launch -n 2) train a tiny model on a
# --limit'ed Fashion-MNIST conversion (4 shards, so each replica reads 2 by `shard auto`)
# for 2 epochs: exit 0, rank 0 prints `test accuracy`, and the replicas' parameter hashes
# (--hash-log: one per step plus the final ones) are equal at every step, epoch ends
# included, and with gradient buckets (bucket_mb) they are those of the unbucketed run. One
# replica under strategy ring equals a run with no strategy. A global batch
# that is no multiple of the replicas is refused. Killing one replica mid-run makes the
# other exit 1 within the timeout naming the lost peer; `--resume` with -n 2 continues from
# the newest checkpoint for 2 more epochs with equal replicas. Kept small for 2-core CI.
set -u

. "$(dirname "$0")/lib.sh"
sl_require_tools sluice-train sluice-record sluice-launch
sl_require_fashion
sl_workdir ring
sl_kill_on_exit KILL
# ports of our own, so parallel test runs do not collide
PB=$(sl_port_base 20005) # blocks 20000..23999, offsets 5..28: see the port plan in lib.sh
sl_convert_fashion 4 2000

# 2000 training records, 500 per shard; the global batch 50 is 25 per replica, so each
# replica takes 1000 / 25 = 40 steps per epoch
sl_tiny_fashion_config "$T/tiny.sl" "shard auto" "epochs 2" "optimizer sgd lr=0.05 momentum=0.9" \
    "schedule cosine" "checkpoint every=1 keep=3" 'run_dir "runs/tiny"'
RING=(--set train.strategy=ring)

# 1. two replicas, two epochs
if run ring2 0 "$BIN/sluice-launch" -n 2 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" \
    --run-dir "$T/run" --hash-log "$T/hash"; then
    last=$(tail -n 1 "$T/ring2.out")
    if [[ "$last" =~ ^\[worker\ 0\]\ test\ accuracy\ 0\.[0-9]{4}$ ]]; then ok "2 replicas: $last"; else fail "last line '$last'"; fi
    n=$(grep -c '^\[worker 0\] epoch [0-9]/2  step ' "$T/ring2.out")
    [ "$n" = 2 ] && ok "rank 0 printed 2 epoch lines" || fail "$n epoch lines from rank 0, expected 2"
    n=$(grep -c '^\[worker 1\]' "$T/ring2.out")
    [ "$n" = 0 ] && ok "rank 1 is silent" || fail "rank 1 printed $n lines"
    grep -q '^\[worker 0\] epoch 1/2  step 40 ' "$T/ring2.out" && ok "40 steps per epoch (batch 25 per replica)" ||
        fail "epoch 1 did not end at step 40"
    l0=$(wc -l <"$T/hash.0")
    [ "$l0" = 81 ] && ok "81 hash lines (steps 0..80)" || fail "$l0 hash lines in rank 0's log, expected 81"
    if cmp -s "$T/hash.0" "$T/hash.1"; then ok "replicas bit-identical at every step"; else
        fail "hash logs differ:"; diff "$T/hash.0" "$T/hash.1" | head -5
    fi
    for s in 40 80; do
        grep -q "^step $s params [0-9a-f]\{16\}$" "$T/hash.1" && ok "epoch end at step $s hashed" || fail "no hash for step $s"
    done
    ls "$T/run"/ckpt-000000080.safetensors >/dev/null 2>&1 && ok "rank 0 checkpointed step 80" || fail "no ckpt at step 80"
    grep -q '^\[worker 0\] epoch 1/2  step 40 .*  exchange [0-9]*\.[0-9] ms/step  (' "$T/ring2.out" &&
        ok "the epoch line reports the visible exchange time" || fail "no 'exchange N ms/step' on the epoch line"
fi

# 1a. the same over the transport (path=tcp) instead of shared memory (the default on one
#     host): every step's parameters bit-identical, and each epoch line names its path
sed 's/^    backend cpu$/    strategy ring path=tcp\n    backend cpu/' "$T/tiny.sl" >"$T/tcp.sl"
if run tcp 0 "$BIN/sluice-launch" -n 2 --port-base "$PB" -- "$BIN/sluice-train" "$T/tcp.sl" \
    --run-dir "$T/tcp" --hash-log "$T/th"; then
    if cmp -s "$T/th.0" "$T/hash.0" && cmp -s "$T/th.1" "$T/hash.1"; then
        ok "path=tcp: every step's parameters bit-identical to the shared-memory run's"
    else
        fail "tcp hash logs differ from the shared-memory ones:"; diff "$T/th.0" "$T/hash.0" | head -5
    fi
    grep -q '^\[worker 0\] epoch 1/2  step 40 .*  wire [0-9.]* KiB/step (shm)' "$T/ring2.out" &&
        grep -q '^\[worker 0\] epoch 1/2  step 40 .*  wire [0-9.]* KiB/step (tcp)' "$T/tcp.out" &&
        ok "epoch lines name the path: shm by default on one host, tcp with path=tcp" ||
        fail "no '(shm)' / '(tcp)' after the wire figure: $(grep -m1 'epoch 1/2' "$T/ring2.out" "$T/tcp.out")"
fi
ls /dev/shm | grep -q '^sluice-' && fail "segments left in /dev/shm: $(ls /dev/shm | grep '^sluice-')" ||
    ok "nothing left in /dev/shm"

# 1b. the same with gradient buckets allreduced during backward (bucket_mb 0.001: 1048
#     bytes, so dense_2's 330 floats and dense_1's 25120 are two buckets): every step's
#     parameters are bit-identical to the unbucketed run's
if run bucket 0 "$BIN/sluice-launch" -n 2 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" \
    --set train.bucket_mb=0.001 --run-dir "$T/bucket" --hash-log "$T/bh"; then
    if cmp -s "$T/bh.0" "$T/hash.0" && cmp -s "$T/bh.1" "$T/hash.1"; then
        ok "bucketed exchange: every step's parameters bit-identical to the unbucketed run's"
    else
        fail "bucketed hash logs differ from the unbucketed ones:"; diff "$T/bh.0" "$T/hash.0" | head -5
    fi
fi

# 2. one replica under strategy ring is a plain run
if run single 0 "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/single" --quiet &&
    run ring1 0 "$BIN/sluice-launch" -n 1 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" \
        --run-dir "$T/ring1" --quiet; then
    a=$(tail -n 1 "$T/single.out")
    b=$(tail -n 1 "$T/ring1.out")
    [ "[worker 0] $a" = "$b" ] && ok "-n 1 ring = no strategy ($a)" || fail "'$b' vs '$a'"
fi

# 3. a global batch that does not split over 3 replicas
if run batch3 1 "$BIN/sluice-launch" -n 3 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" \
    --run-dir "$T/b3"; then
    grep -q "the global batch 50 is not a multiple of the 3 replicas" "$T/batch3.err" && ok "-n 3 with batch 50 refused" ||
        { fail "message:"; cat "$T/batch3.err"; }
fi

# 4. kill a replica mid-run: the other fails naming it within the timeout (5 s), then
#    --resume with -n 2 continues from the newest checkpoint. The replicas run without the
#    launcher here, which would stop the survivor itself. Both runs use gradient buckets.
tfc() {
    echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$((PB + 10))\", \"127.0.0.1:$((PB + 11))\"]}, \"task\": {\"type\": \"worker\", \"index\": $1}}"
}
# (with gradient buckets: the failure reaches the exchange thread mid-backward)
LONG=(--set train.epochs=40 --set train.bucket_mb=0.001 --run-dir "$T/kill" --timeout 5)
TF_CONFIG=$(tfc 0) "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" "${LONG[@]}" >"$T/k0.out" 2>"$T/k0.err" &
p0=$!
TF_CONFIG=$(tfc 1) "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" "${LONG[@]}" >"$T/k1.out" 2>"$T/k1.err" &
p1=$!
disown "$p1" # its SIGKILL is on purpose: no "Killed" report from bash
pids=("$p0" "$p1")
for _ in $(seq 600); do
    if ls "$T/kill"/ckpt-*.safetensors >/dev/null 2>&1; then break; fi
    sleep 0.05
done
sleep 0.1
kill -9 "$p1"
t0=$(date +%s%N)
wait "$p0"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
if [ "$rc" = 1 ]; then ok "survivor exit 1"; else fail "survivor exit $rc, expected 1"; cat "$T/k0.err"; fi
[ "$ms" -lt 5000 ] && ok "survivor exited in $ms ms (timeout 5 s)" || fail "survivor took $ms ms"
# over ZeroMQ "lost rank 1 (ADDR)", over shared memory "rank 1 (ADDR) [pid P, shared memory] died"
if grep -qE "lost rank 1 \(127.0.0.1:$((PB + 11))\)|rank 1 \(127.0.0.1:$((PB + 11))\) \[pid [0-9]+, shared memory\] died" "$T/k0.err"; then
    ok "error names the lost peer: $(grep -E 'rank 1 ' "$T/k0.err" | head -1)"
else fail "error does not name rank 1:"; cat "$T/k0.err"; fi
# started from TF_CONFIG without SLUICE_JOB_ID or CURVE: each replica says at start that the
# job is open to strangers (its id is derived from the addresses) and how to close it
for k in 0 1; do
    grep -q "^sluice warning: this job is open to strangers: its members come from TF_CONFIG and no SLUICE_JOB_ID is set.*give every task the same random SLUICE_JOB_ID beside TF_CONFIG" "$T/k$k.err" &&
        ok "replica $k warns that the TF_CONFIG job has no secret" || { fail "replica $k: no open-job warning"; head -3 "$T/k$k.err"; }
done
newest=$(ls "$T/kill"/ckpt-*.safetensors | sort | tail -n 1)
step=$(basename "$newest" .safetensors)
step=$((10#${step#ckpt-}))
if [ "$step" -ge 40 ] && [ "$step" -lt 1600 ]; then ok "killed mid-run at checkpoint step $step"; else fail "newest step $step"; fi
# the resumed run ends 2 epochs after its checkpoint (not at epoch 40: the other 38 epochs
# took most of this test's time, 3x more under ASan, and check nothing the first 80 steps
# after the resume do not: the start step, equal replicas at every step, a final checkpoint)
end=$((step / 40 + 2))
if run resume 0 "$BIN/sluice-launch" -n 2 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" \
    "${LONG[@]}" --set "train.epochs=$end" --resume --hash-log "$T/rh"; then
    grep -q "^\[worker 0\] resuming from $newest at step $step " "$T/resume.out" && ok "resumed from step $step" ||
        { fail "no resume line for step $step:"; head -3 "$T/resume.out"; }
    [[ "$(tail -n 1 "$T/resume.out")" =~ ^\[worker\ 0\]\ test\ accuracy\ 0\.[0-9]{4}$ ]] && ok "resumed run finished" ||
        fail "last line '$(tail -n 1 "$T/resume.out")'"
    [ "$(head -n 1 "$T/rh.0" | cut -d' ' -f2)" = "$step" ] && ok "resumed replicas start at step $step" ||
        fail "first hash line '$(head -n 1 "$T/rh.0")'"
    cmp -s "$T/rh.0" "$T/rh.1" && ok "resumed replicas bit-identical" || fail "resumed hash logs differ"
    grep -q "open to strangers" "$T/resume.err" && fail "sluice-launch's job (a random SLUICE_JOB_ID) warns it is open" ||
        ok "no open-job warning under sluice-launch (its random SLUICE_JOB_ID)"
    l0=$(wc -l <"$T/rh.0")
    [ "$l0" = 81 ] && ok "81 hash lines (steps $step..$((end * 40)))" || fail "$l0 hash lines in the resumed rank 0's log, expected 81"
    final=$(printf '%s/ckpt-%09d.safetensors' "$T/kill" $((end * 40)))
    [ -f "$final" ] && ok "final checkpoint at step $((end * 40)) (epoch $end)" || fail "no $final"
fi

# 5. sluice-launch -n 2 with strategy none would run two separate trainings into one run
#    folder: refused, naming the strategy
if run none2 1 "$BIN/sluice-launch" -n 2 --port-base "$PB" -- "$BIN/sluice-train" "$T/tiny.sl" --run-dir "$T/none2"; then
    grep -q "sluice-train: this task is one of 2 replicas (SLUICE_WORLD, from sluice-launch) but the train block says strategy none" \
        "$T/none2.err" && ok "-n 2 with strategy none refused" || { fail "message:"; cat "$T/none2.err"; }
    ls "$T/none2"/ckpt-* >/dev/null 2>&1 && fail "a strategy-none replica trained anyway"
fi

# 6. a peer that never starts: rank 0 fails within the timeout naming rank 1 and its address
tfn() {
    echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$((PB + 12))\", \"127.0.0.1:$((PB + 13))\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
}
if TF_CONFIG=$(tfn) run alone 1 "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" --run-dir "$T/alone" --timeout 2; then
    grep -q "rank 1 (127.0.0.1:$((PB + 13))) never answered within 2.0 s" "$T/alone.err" &&
        ok "a peer that never started is named: $(grep -o 'rank 1 (.*never answered within 2.0 s' "$T/alone.err" | head -n 1)" ||
        { fail "error does not say rank 1 never answered:"; cat "$T/alone.err"; }
fi

# 7. unequal shards: 3 files of 400 records over 2 replicas (shard auto: by file) give rank 0
#    two files (800 records, 32 batches of 25) and rank 1 one (16 batches). Both warnings
#    come from rank 0: the uneven file split at the start, and after epoch 1 the counts;
#    every epoch ends at 16 steps on both replicas (32 steps in all), exit 0, identical
#    parameter hashes at every step. (The old loop went on pairing rank 0's batches 17-32
#    with rank 1's next epoch and failed at the final barrier.)
"$BIN/sluice-record" convert fashion-mnist "$T/data3" --shards 3 --limit 1200 >/dev/null 2>"$T/convert3.err" ||
    fail "convert 3 shards: $(cat "$T/convert3.err")"
sed -e 's#"data/#"data3/#' -e 's#eval test every=1#eval none#' "$T/tiny.sl" >"$T/tiny3.sl"
if run uneven 0 "$BIN/sluice-launch" -n 2 --port-base $((PB + 20)) -- "$BIN/sluice-train" "$T/tiny3.sl" "${RING[@]}" \
    --run-dir "$T/uneven" --hash-log "$T/uh"; then
    want="[worker 0] sluice warning: pipeline 'train': 3 files do not split evenly over 2 replicas (shard by file): replica 0 reads 2, replica 1 reads 1; use a file count that is a multiple of the replicas, or shard data"
    grep -qxF "$want" "$T/uneven.err" && ok "uneven file split warned at the start" ||
        { fail "no file split warning:"; cat "$T/uneven.err"; }
    want="[worker 0] warning: epoch 1: rank 1 ran out after 16 steps; rank 0 had more: all replicas end the epoch at 16 (the rest of rank 0's batches unused); give every replica as many batches to use all the data"
    grep -qxF "$want" "$T/uneven.err" && ok "rank 0 warned with the counts after epoch 1" ||
        { fail "no epoch warning:"; cat "$T/uneven.err"; }
    n=$(grep -c 'ran out after' "$T/uneven.err")
    [ "$n" = 1 ] && ok "the same counts are said once" || fail "$n 'ran out' warnings, expected 1"
    grep -q '^\[worker 1\]' "$T/uneven.err" && fail "rank 1 warned too: $(grep '^\[worker 1\]' "$T/uneven.err")" ||
        ok "rank 1 is silent"
    for e in 1 2; do
        grep -q "^\[worker 0\] epoch $e/2  step $((16 * e)) " "$T/uneven.out" && ok "epoch $e ends at step $((16 * e))" ||
            { fail "epoch $e did not end at step $((16 * e)):"; cat "$T/uneven.out"; }
    done
    l0=$(wc -l <"$T/uh.0")
    [ "$l0" = 33 ] && ok "33 hash lines (steps 0..32)" || fail "$l0 hash lines in rank 0's log, expected 33"
    cmp -s "$T/uh.0" "$T/uh.1" && ok "unequal shards: replicas bit-identical at every step" ||
        { fail "hash logs differ:"; diff "$T/uh.0" "$T/uh.1" | head -5; }
fi

# 8. this task's port is taken by another process: exit 1 at once with the address, the OS's
#    reason and what to change; no source file or line in what the user reads
held="$T/held.$((PB + 14))"
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close(); time.sleep(120)' $((PB + 14)) "$held" &
pids+=($!)
disown $! # killed on exit on purpose: no "Killed" report from bash
tfb() {
    echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$((PB + 14))\", \"127.0.0.1:$((PB + 15))\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
}
if ! wait_for 20 test -e "$held"; then
    fail "the listener on port $((PB + 14)) did not start"
elif TF_CONFIG=$(tfb) run inuse 1 "$BIN/sluice-train" "$T/tiny.sl" "${RING[@]}" --run-dir "$T/inuse" --timeout 2; then
    want="sluice-train: ring strategy (rank 0 of 2): transport: rank 0 cannot bind 127.0.0.1:$((PB + 14)): Address already in use"
    hint="---> HINT: another job or process is listening on port $((PB + 14)) (ss -ltnp 'sport = :$((PB + 14))' shows which); stop it, or choose other ports: sluice-launch --port-base, or the addresses in the cluster block or TF_CONFIG"
    grep -qxF -- "$want" "$T/inuse.err" && grep -qxF -- "$hint" "$T/inuse.err" && ok "a port in use: the address, the reason and a hint" ||
        { fail "port in use: not the expected message:"; cat "$T/inuse.err"; }
    grep -q '\.c:[0-9]' "$T/inuse.err" && fail "a source location in the message: $(grep '\.c:[0-9]' "$T/inuse.err")"
fi

if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all ok"
