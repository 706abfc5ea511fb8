#!/usr/bin/env bash
# Benchmark: gradient compression on a slow link. Replicas of sluice-train run as "hosts" in
# network namespaces (10.78.0.1-5/24 on veth pairs into a fifth namespace that holds a
# bridge; all traffic stays between namespaces this script creates), each host's link
# rate-limited with tc tbf on both ends (host egress and bridge-port egress) at 1 Gbit/s and
# 100 Mbit/s. On each link, 2 and 4 replicas train Fashion-MNIST's MLP (the model of
# examples/fashion_mlp.sl: 784-256-128-10, 235146 float32 = 919 KiB of gradient per step;
# global batch 128, SGD momentum 0.9, CPU backend, 1 thread each) with `strategy ring`
# (and `strategy ps` with one ps task on a host of its own, BENCH_STRATEGIES="ring ps") for
# each compression: none, fp16, int8, sign, topk:0.01 (`strategy ring compress=MODE`; top-k
# is written compress=topk(0.01) in the config).
#
# Usage: tests/bench/run bench_compress [--quick]
#   --quick or BENCH_QUICK=1: a smoke run (under ~2 minutes): the 100 Mbit/s link only,
#   10 steps per epoch, 3 epochs, 1 round.
# Environment (defaults in brackets; quick mode's in braces):
#   BENCH_LINKS       link rates for tc [1gbit 100mbit] {100mbit}
#   BENCH_WORLDS      replica counts [2 4]
#   BENCH_MODES       compressions [none fp16 int8 sign topk:0.01]
#   BENCH_STRATEGIES  ring and/or ps [ring]
#   BENCH_STEPS       steps per epoch [50] {10}
#   BENCH_EPOCHS      epochs per run, the first is warm-up [4] {3}
#   BENCH_ROUNDS      rounds; each runs every mode once, in alternating order [3] {1}
#   BENCH_NET         loopback: skip the namespaces, use the host's lo (as where they are
#                     refused); loopback-ns: the lo of a namespace of its own (as where tc is)
#   SLUICE_BIN        the tools' folder (the wrapper in build-bench/bench sets build-bench/bin)
#
# Timing: from rank 0's epoch lines, which give examples/s over the epoch's training steps
# (first batch to last exchange): the step time of a run is the mean over epochs 2..E of
# 1000 * 128 / (examples/s), i.e. total timed wall over timed steps. Each (link, strategy,
# replicas, mode) cell prints the median over rounds and the min-max. Bytes: "link tx" is
# what the kernel counted on each worker host's link (the bridge port's rx_bytes, read
# when rank 0 prints epoch 1 and again when it prints epoch E-1: everything the replica
# sent in epochs 2..E-1, TCP/IP headers included) / ((E-2) * steps), the mean over
# workers, its median over rounds; for ps rows also the ps host's (with E = 2: from epoch
# 1 to the end). "trainer" is the bytes per step the trainer's
# epoch line reports ("wire X KiB/step": the payloads this replica sent), "-" when the
# line has none.
#
# Ends with:
#   RESULT bench_compress ratio=R sluice=X anchor=Y unit=ms/step
# with X = the int8 step time and Y = the uncompressed one (strategy ring, 2 replicas, on
# the slowest link measured), R = Y / X (the target is >= 2.0). A compression this build
# rejects is printed as "not supported by this build" and the rest still runs; without int8
# (or none) the RESULT line carries n/a. Where network namespaces or tc are not permitted
# the benchmark says so and measures over the loopback instead (in a namespace of its own
# when namespaces work, else the host's lo with ports 28005.. and shared counters).
set -u

BIN=${SLUICE_BIN:-$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)/bin}
for tool in sluice-train sluice-record; do
    if [ ! -x "$BIN/$tool" ]; then
        echo "bench_compress: $BIN/$tool is not built (tests/bench/run bench_compress builds it)" >&2
        exit 1
    fi
done

QUICK=${BENCH_QUICK:-0}
for a in "$@"; do
    case $a in
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_compress: unknown argument '$a' (usage: bench_compress [--quick])" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    LINKS=${BENCH_LINKS:-100mbit} STEPS=${BENCH_STEPS:-10} EPOCHS=${BENCH_EPOCHS:-3} ROUNDS=${BENCH_ROUNDS:-1}
else
    LINKS=${BENCH_LINKS:-1gbit 100mbit} STEPS=${BENCH_STEPS:-50} EPOCHS=${BENCH_EPOCHS:-4} ROUNDS=${BENCH_ROUNDS:-3}
fi
WORLDS=${BENCH_WORLDS:-2 4}
MODES=${BENCH_MODES:-none fp16 int8 sign topk:0.01}
STRATEGIES=${BENCH_STRATEGIES:-ring}
BATCH=128
PORT=29500
if [ "$EPOCHS" -lt 2 ] || [ "$STEPS" -lt 1 ] || [ "$ROUNDS" -lt 1 ]; then
    echo "bench_compress: BENCH_EPOCHS must be >= 2 (epoch 1 is warm-up), BENCH_STEPS and BENCH_ROUNDS >= 1" >&2
    exit 2
fi
maxw=0
for w in $WORLDS; do [ "$w" -gt "$maxw" ] && maxw=$w; done
NHOSTS=$maxw
case " $STRATEGIES " in *" ps "*) NHOSTS=$((maxw + 1)) ;; esac

# ---- cleanup on every exit path -------------------------------------------------------
P=slc$$
T=$(mktemp -d /tmp/sluice-bench-compress-XXXXXX)
NSLIST=()
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for p in "${NSLIST[@]}"; do ip netns del "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---- data: 128 * STEPS training records in 8 shards (an epoch is STEPS steps for 1, 2, 4
# or 8 replicas by `shard auto`), converted once into /tmp/sluice-bench -----------------
FM=/usr/share/datasets/fashion-mnist
LIMIT=$((BATCH * STEPS))
DATA=/tmp/sluice-bench/compress-$LIMIT
if [ "$(ls "$DATA"/train-*-of-00008.tfrecord 2>/dev/null | wc -l)" != 8 ]; then
    if [ ! -f "$FM/train-images-idx3-ubyte.gz" ]; then
        echo "bench_compress: no Fashion-MNIST idx files in $FM (Debian's dataset-fashion-mnist)" >&2
        exit 1
    fi
    echo "bench_compress: converting the first $LIMIT Fashion-MNIST records into $DATA" >&2
    mkdir -p /tmp/sluice-bench
    if ! "$BIN/sluice-record" convert fashion-mnist "$DATA" --shards 8 --limit "$LIMIT" >/dev/null 2>"$T/convert.err"; then
        cat "$T/convert.err" >&2
        exit 1
    fi
fi

# config for STRATEGY_LINE (written per strategy and mode)
write_config() { # write_config FILE STRATEGY_LINE EPOCHS
    cat >"$1" <<EOF
pipeline train {
    files "$DATA/train-*.tfrecord"
    shard auto
    interleave cycle=4 block=16 parallel=auto
    shuffle 1000
    map parse_example(image: bytes, label: int64) | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255) parallel=auto
    batch $BATCH drop_remainder
    prefetch auto
}
model mlp {
    input 28x28x1
    flatten
    dense 256 activation=relu
    dense 128 activation=relu
    dense 10
}
train {
    model mlp
    data train
    eval none
    epochs $3
    optimizer sgd lr=0.05 momentum=0.9
    schedule cosine
    checkpoint none
    backend cpu
    threads 1
    seed 1
    $2
}
EOF
}

# ---- which compressions this build takes ---------------------------------------------
# A one-replica, two-step run of the option without a cluster: the ring runs as one
# replica; the ps stops at "the cluster has no ps tasks", after the config was read. The
# option is rejected when the error names the config (FILE:LINE:COL). For none, a build
# without the option runs the plain strategy line.
clean_env=(env -u TF_CONFIG -u SLUICE_TASK -u SLUICE_RANK -u SLUICE_WORLD -u SLUICE_NUM_PS -u SLUICE_PORT_BASE
    -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_STEP_NODELIST -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE)
declare -A LINE # LINE[strategy,mode] = the strategy statement, or "" when not supported
declare -A WHY
probe() { # probe STRATEGY_LINE: 0 when the build takes the line
    write_config "$T/probe.sl" "$1" 1
    "${clean_env[@]}" "$BIN/sluice-train" "$T/probe.sl" --run-dir "$T/probe" --overwrite --quiet \
        --set train.steps=2 >/dev/null 2>"$T/probe.err" && return 0
    ! grep -q "probe\.sl:[0-9]*:[0-9]*" "$T/probe.err"
}
opt() { # opt MODE: the option as the config language writes it (topk:F is topk(F): a bare
    # word cannot hold a ':')
    case $1 in topk:*) echo "compress=topk(${1#topk:})" ;; *) echo "compress=$1" ;; esac
}
for st in $STRATEGIES; do
    for m in $MODES; do
        if probe "strategy $st $(opt "$m")"; then
            LINE[$st,$m]="strategy $st $(opt "$m")"
        elif [ "$m" = none ]; then
            LINE[$st,$m]="strategy $st"
        else
            LINE[$st,$m]=""
            WHY[$st,$m]=$(grep -m1 -i "compress" "$T/probe.err" || head -1 "$T/probe.err")
        fi
    done
done
# without the option at all the build cannot have anything to compare
for st in $STRATEGIES; do
    if ! probe "strategy $st"; then
        echo "bench_compress: this build refuses the plain config:" >&2
        cat "$T/probe.err" >&2
        exit 1
    fi
done

# ---- hosts: network namespaces with rate-limited veth links --------------------------
NET=netns
NETWHY=""
HOSTNS=()  # the namespace of host i ("" = the current one)
ADDR=()    # host i's address
probe_net() {
    local a=$P-pa b=$P-pb
    ip netns add "$a" 2>"$T/net.err" || { NETWHY="network namespaces not permitted: $(head -1 "$T/net.err")"; return 1; }
    NSLIST+=("$a")
    ip netns add "$b" 2>"$T/net.err" || { NETWHY="network namespaces not permitted: $(head -1 "$T/net.err")"; return 1; }
    NSLIST+=("$b")
    ip link add "$P-x" netns "$a" type veth peer name "$P-y" netns "$b" 2>"$T/net.err" ||
        { NETWHY="veth pairs not permitted: $(head -1 "$T/net.err")"; return 2; }
    ip -n "$a" link add br0 type bridge 2>"$T/net.err" ||
        { NETWHY="bridges not permitted: $(head -1 "$T/net.err")"; return 2; }
    ip -n "$a" link set "$P-x" up
    ip netns exec "$a" tc qdisc add dev "$P-x" root tbf rate 100mbit burst 64kb latency 50ms 2>"$T/net.err" ||
        { NETWHY="tc tbf not permitted: $(head -1 "$T/net.err")"; return 2; }
    return 0
}
if [ "${BENCH_NET:-}" = loopback ] || [ "${BENCH_NET:-}" = loopback-ns ]; then
    NET=$BENCH_NET NETWHY="BENCH_NET=$BENCH_NET"
elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    NET=loopback NETWHY="no ip or tc command"
else
    probe_net
    case $? in 1) NET=loopback ;; 2) NET=loopback-ns ;; esac
    ip netns del "$P-pa" 2>/dev/null
    ip netns del "$P-pb" 2>/dev/null
    NSLIST=()
fi

up_hosts() {
    local i sw=$P-sw
    ip netns add "$sw" && NSLIST+=("$sw") || return 1
    ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || return 1
    for ((i = 0; i < NHOSTS; i++)); do
        ip netns add "$P-h$i" && NSLIST+=("$P-h$i") || return 1
        ip -n "$P-h$i" link set lo up &&
            ip link add "$P-v$i" netns "$P-h$i" type veth peer name "$P-s$i" netns "$sw" &&
            ip -n "$P-h$i" link set "$P-v$i" name eth0 &&
            ip -n "$P-h$i" addr add "10.78.0.$((i + 1))/24" dev eth0 &&
            ip -n "$P-h$i" link set eth0 up &&
            ip -n "$sw" link set "$P-s$i" master br0 &&
            ip -n "$sw" link set "$P-s$i" up || return 1
        HOSTNS[$i]=$P-h$i
        ADDR[$i]=10.78.0.$((i + 1)):$PORT
    done
    for ((i = 1; i < NHOSTS; i++)); do
        for _ in $(seq 1 25); do
            ip netns exec "$P-h0" ping -c 1 -W 1 "10.78.0.$((i + 1))" >/dev/null 2>&1 && break
            sleep 0.2
        done
    done
}
rate_bits() { # rate_bits RATE: tc's rate (100mbit, 1gbit, 1.5gbit, 800kbit) in bit/s
    awk -v r="$1" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
        m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; printf "%d", v * m }'
}
set_rate() { # set_rate RATE: tbf at RATE on both ends of every host's link
    local i r=$1 bits burst
    bits=$(rate_bits "$r")
    burst=$((bits / 8 / 200)) # 5 ms of the rate, at least 64 KiB (a GSO packet)
    [ "$burst" -lt 65536 ] && burst=65536
    for ((i = 0; i < NHOSTS; i++)); do
        ip netns exec "$P-h$i" tc qdisc replace dev eth0 root tbf rate "$r" burst "$burst" latency 50ms || return 1
        ip netns exec "$P-sw" tc qdisc replace dev "$P-s$i" root tbf rate "$r" burst "$burst" latency 50ms || return 1
    done
}
LOCNS=""
if [ "$NET" = netns ]; then
    if ! up_hosts; then
        echo "bench_compress: could not build the namespace network; measuring over the loopback" >&2
        for p in "${NSLIST[@]}"; do ip netns del "$p" 2>/dev/null; done
        NSLIST=()
        NET=loopback NETWHY="the namespace network could not be built"
    fi
fi
if [ "$NET" = loopback-ns ]; then
    # the loopback of a namespace of our own: exact counters, nobody else's traffic
    if ip netns add "$P-lo" 2>/dev/null && ip -n "$P-lo" link set lo up; then
        NSLIST+=("$P-lo")
        LOCNS=$P-lo
    else
        NET=loopback
    fi
fi
if [ "$NET" != netns ]; then
    LINKS=loopback
    base=$PORT
    [ -z "$LOCNS" ] && base=$((28005 + ($$ % 40) * 100))
    for ((i = 0; i < NHOSTS; i++)); do
        HOSTNS[$i]=$LOCNS
        ADDR[$i]=127.0.0.1:$((base + i))
    done
fi

in_host() { # in_host I CMD...
    local ns=${HOSTNS[$1]}
    shift
    if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}
read_tx() { # read_tx HOSTS: the bytes each host 0..HOSTS-1 has sent so far, one per line; in
    # one call, so that the hosts are read at nearly one moment. With namespaces: the rx
    # counters of the bridge's ports (what each host's eth0 put on its link); on the
    # loopback: the one lo's tx counter, for every host.
    local i files=()
    if [ "$NET" = netns ]; then
        for ((i = 0; i < $1; i++)); do files+=("/sys/class/net/$P-s$i/statistics/rx_bytes"); done
        ip netns exec "$P-sw" cat "${files[@]}" 2>/dev/null
    else
        local v
        v=$(in_host 0 cat /sys/class/net/lo/statistics/tx_bytes 2>/dev/null)
        for ((i = 0; i < $1; i++)); do echo "${v:-0}"; done
    fi
}

# ---- one run --------------------------------------------------------------------------
# run_job STRATEGY WORLD MODE TAG: sets R_MS (step ms), R_TX (worker tx bytes/step),
# R_PSTX (ps tx bytes/step), R_TR (trainer bytes/step or -); returns 1 on failure.
run_job() {
    local st=$1 n=$2 m=$3 tag=$4 i nps=0 cfgf
    cfgf=$T/$4.sl
    [ "$st" = ps ] && nps=1
    write_config "$cfgf" "${LINE[$st,$m]}" "$EPOCHS"
    local workers="" ps=""
    for ((i = 0; i < n; i++)); do workers+="${workers:+, }\"${ADDR[$i]}\""; done
    [ $nps = 1 ] && ps=", \"ps\": [\"${ADDR[$n]}\"]"
    local hosts=$((n + nps)) before=() after=() rc=0 timed=$((EPOCHS * STEPS)) last=$((EPOCHS - 1))
    mapfile -t before < <(read_tx $hosts)
    # Rank 0's stdout goes through a FIFO to a reader that copies it to out0 and reads the
    # counters as soon as epoch 1's line comes (after the warm-up: start-up, the parameter
    # broadcast, buffers filling) and again at epoch E-1's: the bytes then cover whole timed
    # epochs, both reads equally late after their line, whatever the load. With E = 2: from
    # epoch 1's line to the end; without the lines: the whole run.
    rm -f "$T/$tag.fifo" "$T/$tag.tx1" "$T/$tag.tx2"
    mkfifo "$T/$tag.fifo" || return 1
    (
        while IFS= read -r line; do
            printf '%s\n' "$line" >>"$T/$tag.out0"
            case $line in
            "epoch 1/"* | "epoch 1 "*) read_tx $hosts >"$T/$tag.tx1" ;;
            "epoch $last/"* | "epoch $last "*) [ $last -ge 2 ] && read_tx $hosts >"$T/$tag.tx2" ;;
            esac
        done <"$T/$tag.fifo"
    ) &
    local reader=$!
    PIDS=()
    local tmo=$((EPOCHS * STEPS * 2 + 120)) # 2 s a step is far slower than any link here
    for ((i = 0; i < hosts; i++)); do
        local type=worker idx=$i out=$T/$tag.out$i
        [ $i -ge "$n" ] && type=ps idx=$((i - n))
        [ $i = 0 ] && out=$T/$tag.fifo
        in_host $i "${clean_env[@]}" "TF_CONFIG={\"cluster\": {\"worker\": [$workers]$ps}, \"task\": {\"type\": \"$type\", \"index\": $idx}}" \
            timeout -k 5 "$tmo" "$BIN/sluice-train" "$cfgf" --run-dir "$T/run-$tag" --overwrite --timeout 60 \
            >"$out" 2>"$T/$tag.err$i" &
        PIDS+=($!)
    done
    PIDS+=("$reader") # for the cleanup (it would wait on a FIFO nobody opens)
    for ((i = 0; i < hosts; i++)); do
        wait "${PIDS[$i]}"
        local e=$?
        if [ $e != 0 ] && [ $rc = 0 ]; then
            rc=$e
            echo "  $tag: task $i exited $e:" >&2
            tail -5 "$T/$tag.err$i" >&2
        fi
    done
    PIDS=()
    mapfile -t after < <(read_tx $hosts)
    wait $reader
    if [ -s "$T/$tag.tx1" ]; then
        mapfile -t before <"$T/$tag.tx1"
        timed=$(((EPOCHS - 1) * STEPS))
        if [ -s "$T/$tag.tx2" ]; then
            mapfile -t after <"$T/$tag.tx2"
            timed=$(((EPOCHS - 2) * STEPS))
        fi
    fi
    [ $rc = 0 ] || return 1
    # step time: epochs 2..E of rank 0's epoch lines
    R_MS=$(awk -v b=$BATCH '/^epoch [0-9]+/ { split($2, e, "/"); if (e[1] < 2) next
        for (i = 1; i <= NF; i++) if ($i == "examples/s" && $(i - 1) > 0) { s += 1000 * b / $(i - 1); k++ } }
        END { if (k) printf "%.2f", s / k }' "$T/$tag.out0")
    if [ -z "$R_MS" ]; then
        echo "  $tag: no timed epoch line in rank 0's output:" >&2
        tail -5 "$T/$tag.out0" >&2
        return 1
    fi
    local steps=$timed sum=0
    for ((i = 0; i < n; i++)); do sum=$((sum + ${after[i]:-0} - ${before[i]:-0})); done
    if [ "$NET" = netns ]; then
        R_TX=$((sum / n / steps))
        R_PSTX=-
        [ $nps = 1 ] && R_PSTX=$(((after[n] - before[n]) / steps))
    else
        # one lo for all: everything every task sent, shared out over the workers
        R_TX=$(((after[0] - before[0]) / n / steps))
        R_PSTX=-
    fi
    # the trainer's own count, from the last epoch line: "... N bytes/step ..." or
    # "sent X KiB/step" style (whatever unit it prints, converted to bytes)
    R_TR=$(awk '/^epoch [0-9]+/ { l = $0 } END { n = split(l, f, /[ \t]+/)
        for (i = 2; i <= n; i++) { u = f[i]; if (u !~ /\/step$/) continue; v = f[i - 1]; sub(/\/step$/, "", u)
            m = 0
            if (u == "B" || u == "bytes") m = 1; else if (u == "KB" || u == "kB") m = 1e3; else if (u == "KiB") m = 1024
            else if (u == "MB") m = 1e6; else if (u == "MiB") m = 1048576; else if (u == "GB") m = 1e9
            else if (u == "GiB") m = 1073741824
            if (m && v + 0 > 0) { printf "%d", v * m; exit } } }' "$T/$tag.out0")
    [ -n "$R_TR" ] || R_TR=-
    return 0
}

kib() { [ "$1" = - ] && echo - || awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
stats() { # stats V...: "median [min-max]" (median of an even count: the mean of the middle two)
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        if (NR == 1) printf "%.2f", med; else printf "%.2f [%.2f-%.2f]", med, v[1], v[NR] }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---- the runs -------------------------------------------------------------------------
case $NET in
netns) echo "bench_compress: hosts are network namespaces 10.78.0.1-$NHOSTS on veth links to a bridge;" \
    "tc tbf on both ends of every host's link" ;;
*)
    where="127.0.0.1 in a namespace of its own"
    [ -n "$LOCNS" ] || where="the host lo, counters shared with other traffic"
    echo "bench_compress: cannot rate-limit a link here ($NETWHY): loopback numbers ($where)" ;;
esac
echo "  fashion MLP 784-256-128-10 (235146 float32 = 919 KiB of gradient), global batch $BATCH, CPU, 1 thread a task;"
echo "  $STEPS steps an epoch, $EPOCHS epochs a run (epoch 1 warm-up), $ROUNDS round(s), modes alternating;" \
    "data $DATA"
echo "  step ms: median over rounds [min-max]; link tx: bytes each worker host put on its link per timed step"
echo "  (the kernel's count over whole epochs, headers included; ps rows: and the ps host's)"
echo "  trainer: bytes per step from the trainer's epoch line"
for st in $STRATEGIES; do
    for m in $MODES; do
        [ -n "${LINE[$st,$m]}" ] || echo "  strategy $st compress=$m: not supported by this build (${WHY[$st,$m]})"
    done
done
printf '\n%-8s %-5s %-3s %-11s %-28s %-22s %s\n' link strat n compress "step ms" "link tx KiB/step" "trainer KiB/step"
declare -A MS
for link in $LINKS; do
    if [ "$NET" = netns ] && ! set_rate "$link"; then
        echo "bench_compress: tc could not set $link on the links" >&2
        exit 1
    fi
    for st in $STRATEGIES; do
        for n in $WORLDS; do
            declare -A ms=() tx=() pstx=() tr=()
            for ((r = 1; r <= ROUNDS; r++)); do
                order=$MODES
                [ $((r % 2)) = 0 ] && order=$(printf '%s\n' $MODES | tac | tr '\n' ' ')
                for m in $order; do
                    [ -n "${LINE[$st,$m]}" ] || continue
                    tag=$link-$st-$n-${m//[:.]/_}-$r
                    if run_job "$st" "$n" "$m" "$tag"; then
                        ms[$m]+="$R_MS " tx[$m]+="$R_TX " pstx[$m]+="$R_PSTX " tr[$m]=$R_TR
                    else
                        ms[$m]+="fail "
                    fi
                done
            done
            for m in $MODES; do
                if [ -z "${LINE[$st,$m]}" ]; then
                    printf '%-8s %-5s %-3s %-11s %s\n' "$link" "$st" "$n" "$m" "not supported by this build"
                    continue
                fi
                case " ${ms[$m]} " in *" fail "*)
                    printf '%-8s %-5s %-3s %-11s %s\n' "$link" "$st" "$n" "$m" "failed (see above)"
                    continue ;;
                esac
                txs=$(kib "$(median ${tx[$m]})")
                [ "$st" = ps ] && [ "$NET" = netns ] && txs="$txs (ps $(kib "$(median ${pstx[$m]})"))"
                printf '%-8s %-5s %-3s %-11s %-28s %-22s %s\n' "$link" "$st" "$n" "$m" "$(stats ${ms[$m]})" "$txs" \
                    "$(kib "${tr[$m]}")"
                MS[$link,$st,$n,$m]=$(median ${ms[$m]})
            done
            unset ms tx pstx tr
        done
    done
done

# ---- the result: ring, 2 replicas (the main job's setting), on the slowest link -------
slow=${LINKS##* }
if [ "$NET" = netns ]; then
    for link in $LINKS; do [ "$(rate_bits "$link")" -lt "$(rate_bits "$slow")" ] && slow=$link; done
fi
rst=ring rn=2
case " $STRATEGIES " in *" ring "*) ;; *) rst=${STRATEGIES%% *} ;; esac
case " $WORLDS " in *" 2 "*) ;; *) rn=${WORLDS%% *} ;; esac
none=${MS[$slow,$rst,$rn,none]:-}
int8=${MS[$slow,$rst,$rn,int8]:-}
echo
if [ -n "$none" ] && [ -n "$int8" ]; then
    echo "none / int8 on $slow, strategy $rst, $rn replicas: $none / $int8 ms a step"
    echo "RESULT bench_compress ratio=$(awk -v a="$none" -v b="$int8" 'BEGIN { printf "%.2f", a / b }') sluice=$int8 anchor=$none unit=ms/step"
else
    echo "no int8 or no uncompressed time on $slow (strategy $rst, $rn replicas): no ratio"
    echo "RESULT bench_compress ratio=n/a sluice=${int8:-n/a} anchor=${none:-n/a} unit=ms/step"
fi
