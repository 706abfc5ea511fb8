#!/usr/bin/env bash
# A 3-host ring over network namespaces: three "hosts" (namespaces) with addresses
# 10.77.0.1-3/24 on veth links into a fourth namespace that holds a bridge, so all traffic
# stays between namespaces this test creates. Each host runs example_ring_allreduce with a
# TF_CONFIG naming the three addresses: the allreduce of 1,000,003 floats must be exact.
# Then the link of host 2 (rank 1) is cut mid-run: the others must fail within the timeout,
# rank 2 naming rank 1 by its address, and never hang. Then 2 ranks on each of two hosts:
# the hierarchy (shared memory inside a host, the leaders' ring between hosts) is exact and
# says so ("path shm+tcp"), and a rank that fails is named by all the others.
# Where `ip netns add` is not permitted: "skipped: network namespaces not permitted", exit 77.
set -u
# ZeroMQ is not built with ThreadSanitizer; in a TSan build, ignore what happens inside it
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$(cd "$(dirname "$0")" && pwd)/tsan_zmq.supp"

BIN=${SLUICE_BIN:-build/bin}
EX=$BIN/example_ring_allreduce
if [ ! -x "$EX" ]; then echo "skipped: $EX is not built"; exit 77; fi
if ! command -v ip >/dev/null; then echo "skipped: network namespaces not permitted (no ip command)"; exit 77; fi

P=slr$$
NS=("$P-h0" "$P-h1" "$P-h2")
SW=$P-sw
T=$(mktemp -d /tmp/sluice-netns-XXXXXX)
cleanup() {
    for n in "${NS[@]}" "$SW"; do ip netns del "$n" 2>/dev/null; done
    rm -rf "$T"
}
if ! ip netns add "$SW" 2>/dev/null; then echo "skipped: network namespaces not permitted"; exit 77; fi
trap cleanup EXIT
trap "exit 1" INT TERM

set -e
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
for i in 0 1 2; do
    ip netns add "${NS[$i]}"
    ip -n "${NS[$i]}" link set lo up
    ip link add "$P-v$i" netns "${NS[$i]}" type veth peer name "$P-s$i" netns "$SW"
    ip -n "${NS[$i]}" link set "$P-v$i" name eth0
    ip -n "${NS[$i]}" addr add "10.77.0.$((i + 1))/24" dev eth0
    ip -n "${NS[$i]}" link set eth0 up
    ip -n "$SW" link set "$P-s$i" master br0
    ip -n "$SW" link set "$P-s$i" up
done
set +e
# wait for the bridge ports to forward (no STP: at once, but give it a moment), and where
# ping is installed until host 0 reaches the others (without ping, that loop alone waited out
# all its 40 tries, 9 s of every run)
for i in 0 1 2; do
    for k in $(seq 1 20); do
        ip -n "$SW" -d link show "$P-s$i" | grep -q 'bridge_slave state forwarding' && break
        sleep 0.2
    done
done
if command -v ping >/dev/null; then
    for i in 1 2; do
        for k in $(seq 1 20); do
            ip netns exec "${NS[0]}" ping -c 1 -W 1 "10.77.0.$((i + 1))" >/dev/null 2>&1 && break
            sleep 0.2
        done
    done
fi

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
PORT=29500
W="[\"10.77.0.1:$PORT\", \"10.77.0.2:$PORT\", \"10.77.0.3:$PORT\"]"

run_rank() { # run_rank I ARGS...: example_ring_allreduce as rank I inside host I
    local i=$1
    shift
    ip netns exec "${NS[$i]}" env "TF_CONFIG={\"cluster\": {\"worker\": $W}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
        "$EX" "$@" >"$T/out$i" 2>"$T/err$i"
}

# 1. the ring works across the three hosts
pids=()
for i in 0 1 2; do run_rank $i --count 1000003 --reps 3 --timeout 20 & pids+=($!); done
for i in 0 1 2; do
    wait "${pids[$i]}" || fail "rank $i exited $?: $(cat "$T/err$i")"
    grep -q "^rank $i/3 (10.77.0.$((i + 1)):$PORT): allreduce of 1000003 floats ok, .*broadcast \"hello from rank 2\"; dropped 0; path tcp$" "$T/out$i" ||
        fail "rank $i output: $(cat "$T/out$i" "$T/err$i")"
done
[ $fails -eq 0 ] && echo "ok   3-host ring over 10.77.0.1-3: allreduce exact on every rank"

# 2. cut host 1's link mid-run: nobody hangs; rank 2 (downstream of 1) names it
TO=3
pids=()
for i in 0 1 2; do run_rank $i --count 4000000 --reps 100000 --timeout $TO & pids+=($!); done
sleep 1.5
ip -n "${NS[1]}" link set eth0 down
start=$(date +%s)
for i in 0 2; do
    wait "${pids[$i]}"
    rc=$?
    [ $rc -eq 1 ] || fail "rank $i exited $rc after the cut, expected 1: $(cat "$T/err$i")"
done
took=$(( $(date +%s) - start ))
[ $took -le $((TO + 5)) ] || fail "the survivors took $took s (timeout $TO s)"
grep -q "rank 1 (10.77.0.2:$PORT)" "$T/err2" || fail "rank 2 does not name rank 1: $(cat "$T/err2")"
echo "  rank 0: $(head -1 "$T/err0")"
echo "  rank 2: $(head -1 "$T/err2")"
kill "${pids[1]}" 2>/dev/null
wait "${pids[1]}" 2>/dev/null
[ $fails -eq 0 ] && echo "ok   cut link: survivors failed in ${took}s naming the lost peer"

# 3. two ranks on each of hosts 0 and 2 (host 1's link is down now): shared memory inside a
#    host, the transport between the hosts' leaders (ranks 0 and 2); exact on every rank
W4="[\"10.77.0.1:$PORT\", \"10.77.0.1:$((PORT + 1))\", \"10.77.0.3:$PORT\", \"10.77.0.3:$((PORT + 1))\"]"
run_rank4() { # run_rank4 I ARGS...: rank I of 4, inside host 0 (ranks 0, 1) or 2 (ranks 2, 3)
    local i=$1
    shift
    ip netns exec "${NS[$((i / 2 * 2))]}" env "TF_CONFIG={\"cluster\": {\"worker\": $W4}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
        "$EX" "$@" >"$T/h$i" 2>"$T/he$i"
}
pids=()
for i in 0 1 2 3; do run_rank4 $i --count 1000003 --reps 3 --timeout 20 & pids+=($!); done
f0=$fails
for i in 0 1 2 3; do
    wait "${pids[$i]}" || fail "2x2: rank $i exited $?: $(cat "$T/he$i")"
    grep -q "^rank $i/4 (10.77.0.$((i / 2 * 2 + 1)):$((PORT + i % 2))): allreduce of 1000003 floats ok, .*broadcast \"hello from rank 3\"; dropped 0; path shm+tcp$" "$T/h$i" ||
        fail "2x2: rank $i output: $(cat "$T/h$i" "$T/he$i")"
done
[ $fails -eq $f0 ] && echo "ok   2 hosts x 2 ranks: shared memory inside each host, the leaders' ring between them, exact"

# 4. the same, rank 1 (host 0, not a leader) fails before the allreduce: everyone else
#    exits 1 naming it, within the timeout
pids=()
for i in 0 1 2 3; do run_rank4 $i --count 1000003 --reps 3 --timeout $TO --fail-rank 1 & pids+=($!); done
start=$(date +%s)
f0=$fails
for i in 0 2 3; do
    wait "${pids[$i]}"
    rc=$?
    [ $rc -eq 1 ] || fail "2x2 failing rank 1: rank $i exited $rc, expected 1: $(cat "$T/he$i")"
    grep -q "rank 1 (10.77.0.1:$((PORT + 1)))" "$T/he$i" || fail "2x2: rank $i does not name rank 1: $(cat "$T/he$i")"
done
wait "${pids[1]}"
took=$(( $(date +%s) - start ))
[ $took -le $((TO + 5)) ] || fail "2x2: the others took $took s (timeout $TO s)"
echo "  rank 3: $(head -1 "$T/he3")"
[ $fails -eq $f0 ] && echo "ok   2x2, a rank failing: the others named it in ${took}s"

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
