# Shared by the integration tests (source it; it is not a test itself): skip checks, a
# work folder removed on exit, pass/fail accounting, a small Fashion-MNIST conversion and
# the pieces the training tests share.
#   . "$(dirname "$0")/lib.sh"
#   sl_require_tools sluice-train sluice-record   # exit 77 (skipped) when one is not built
#   sl_require_fashion                             # ... or when Debian's idx files are missing
#   sl_workdir train                               # T=/tmp/sluice-train-XXXXXX, removed on exit
#   sl_convert_fashion 2 1000                      # $T/data: 2 shards of the first 1000 records
#   run NAME WANT_RC CMD... && ok "..."            # output kept in $T/NAME.{out,err}
#   sl_finish                                      # exit 1 if anything failed
# and, for the training tests: sl_tiny_fashion_config (a tiny model's config),
# sl_kill_on_exit (background pids killed on exit), wait_for, launch / started_pid
# (sluice-launch in the background), fail_show (fail and show the output).
#
# Ports. Every test port is below 32768: Linux hands out 32768..60999 as the source ports of
# outgoing connections, so a fixed port up there can be taken by any other test's connection
# ("Address already in use"). Tests that may run at the same time never share a port:
#   unit tests              port 0 (the kernel picks), except test_cluster_launchers 9000..9399,
#                           test_strategy_ring 10000..11999
#                           and the ps ones: 12000..19999 (test_strategy_ps 12000..15999,
#                           test_ps_server 16000..19999)
#   integration scripts     20000..31999, in blocks of 100 ports (offsets below are within
#                           a block):
#     test_train_ps.sh      PB = 20000 + (pid % 120) * 100 + 50 in any block, using PB..PB+52:
#                           offsets 50..99 of its block and 0..2 of the next one
#     test_train_ring.sh    blocks 20000..23999, offsets 5..28  (PB = 20005 + (pid % 40) * 100)
#     test_sluice_launch.sh blocks 24000..27999, offsets 5..27  (PB = 24005 + (pid % 40) * 100)
#     test_gpu_placement.sh blocks 28000..31999, offsets 5..7   (PB = 28005 + (pid % 40) * 100)
#     test_docs.py          blocks 28000..31999, offsets 10..19 (its sluice-launch --port-base)
#     test_train_evaluator.sh blocks 28000..31999, offsets 20..23 (PB = 28020 + (pid % 40) * 100)
#     test_file_size_limit.sh blocks 28000..31999, offsets 24..25 (PB = 28024 + (pid % 40) * 100)
#     test_resume_state.sh  blocks 28000..31999, offsets 26..29 (PB = 28026 + (pid % 40) * 100)
#     test_launchers.sh     blocks 28000..31999, offsets 30..33 (PB = 28030 + (pid % 40) * 100)
#     free for new scripts  blocks 28000..31999, offsets 8..9 and 34..37
#     test_train_stop_replicas.sh blocks 28000..31999, offsets 38..49 (PB = 28038 + (pid % 40) * 100)
#     test_ring_netns.sh    29500 inside network namespaces of its own (no host port)
# sl_port_base FIRST: FIRST + a block of 0..3999 picked from this shell's pid.
sl_port_base() { echo $(($1 + ($$ % 40) * 100)); }

BIN=${SLUICE_BIN:-build/bin}
# The CPU backend chooses between OpenBLAS and its own AVX-512 GEMM by timing each shape once
# per process (train/backend_cpu_gemm.c); the two round differently, and on a loaded machine
# two processes can time one shape differently. A resumed run takes the choices of the run
# it resumes (from the checkpoint), but the tests also compare runs started apart (a stopped
# and resumed run against one that never stopped) bit for bit, so they pin the GEMM, as
# docs/guarantees.md tells users who need that to do (the choice and its checkpointing are
# tested in test_backend_cpu and test_checkpoint).
export SLUICE_CPU_GEMM=${SLUICE_CPU_GEMM:-avx512}
FM=/usr/share/datasets/fashion-mnist
fails=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
# sl_finish: the verdict of the script ($0's name), exit 1 if anything failed
sl_finish() {
    if [ "$fails" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
    echo "PASS: $(basename "$0" .sh)"
}

sl_require_tools() {
    local tool
    for tool in "$@"; do
        if [ ! -x "$BIN/$tool" ]; then echo "skipped: $BIN/$tool is not built"; exit 77; fi
    done
}

sl_require_fashion() {
    if [ ! -f "$FM/train-labels-idx1-ubyte.gz" ]; then echo "skipped: no Fashion-MNIST idx files in $FM"; exit 77; fi
}

sl_workdir() {
    T=$(mktemp -d "/tmp/sluice-$1-XXXXXX")
    trap 'rm -rf "$T"' EXIT
}

# SHARDS LIMIT: the first LIMIT records of each split into $T/data
sl_convert_fashion() {
    "$BIN/sluice-record" convert fashion-mnist "$T/data" --shards "$1" --limit "$2" >/dev/null 2>"$T/convert.err" ||
        { cat "$T/convert.err"; echo "FAIL: convert"; exit 1; }
}

# sl_tiny_fashion_config FILE PIPELINE-LINE TRAIN-LINE...: write to FILE a config over the
# conversion in $T/data: the pipelines train and test (raw 28x28x1 images scaled to [0, 1];
# train: PIPELINE-LINE when not "" (e.g. "shard auto"), shuffle 500, batch 50
# drop_remainder; test: batch 100), the model tiny (flatten, dense 32 relu, dense 10) and a
# train block: model tiny, data train, eval test every=1, the TRAIN-LINEs, backend cpu,
# threads 1, seed 1.
sl_tiny_fashion_config() {
    local map='map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)'
    local file=$1 pipe=$2
    shift 2
    {
        printf 'pipeline train {\n    files "data/train-*.tfrecord"\n'
        [ -n "$pipe" ] && printf '    %s\n' "$pipe"
        printf '    shuffle 500\n    %s\n    batch 50 drop_remainder\n}\n' "$map"
        printf 'pipeline test {\n    files "data/test-*.tfrecord"\n    %s\n    batch 100\n}\n' "$map"
        printf 'model tiny {\n    input 28x28x1\n    flatten\n    dense 32 activation=relu\n    dense 10\n}\n'
        printf 'train {\n    model tiny\n    data train\n    eval test every=1\n'
        printf '    %s\n' "$@"
        printf '    backend cpu\n    threads 1\n    seed 1\n}\n'
    } >"$file"
}

# run NAME WANT_RC CMD...: run, keep stdout/stderr in $T/NAME.{out,err}, check the exit status
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, expected $want"
        sed 's/^/    /' "$T/$name.err" "$T/$name.out" | tail -20
        return 1
    fi
    return 0
}

# sl_kill_on_exit [SIGNAL]: on exit, send SIGNAL (KILL by default) to every pid in the array
# pids (background processes the test adds there), then remove $T
pids=()
sl_kill_on_exit() {
    SL_EXIT_SIGNAL=${1:-KILL}
    trap 'for p in "${pids[@]}"; do kill -"$SL_EXIT_SIGNAL" "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
}

# wait_for SECONDS CMD...: poll CMD every 0.1 s; 1 when it never held
wait_for() {
    local n=$(($1 * 10))
    shift
    while [ "$n" -gt 0 ]; do
        "$@" && return 0
        sleep 0.1
        n=$((n - 1))
    done
    return 1
}

# launch NAME ARGS...: start sluice-launch in the background, output in $T/NAME.{out,err};
# $lp its pid (also added to pids)
launch() {
    local name=$1
    shift
    "$BIN/sluice-launch" "$@" >"$T/$name.out" 2>"$T/$name.err" &
    lp=$!
    pids+=("$lp")
}

# started_pid NAME TASK: the pid of the newest "[launch] started TASK (pid N)" line of $T/NAME.err
started_pid() { sed -n "s/^\[launch\] started $2 (pid \([0-9]*\))$/\1/p" "$T/$1.err" | tail -n 1; }

# fail_show WHAT FILE...: fail WHAT, then print the FILEs (the output that shows why)
fail_show() {
    fail "$1"
    shift
    cat "$@"
}
