#!/usr/bin/env bash
# Simulated hosts for bench_allreduce: network namespaces PREFIX-h0 .. PREFIX-h(N-1) with
# addresses 10.79.0.1 .. 10.79.0.N/24 on eth0, each a veth link into PREFIX-sw, which holds
# a bridge and, on it, 10.79.0.254 (where mpirun runs: its PMIx server listens on TCP, which
# the ranks in the hosts reach over the bridge). No namespace has a route out of 10.79.0.0/24
# nor a link out of these namespaces, so traffic never leaves them.
#   netns_hosts.sh up PREFIX N         make them (first removing those of dead benches)
#   netns_hosts.sh rate PREFIX N RATE  limit every link to RATE (tc: 1gbit, 10gbit) each way
#   netns_hosts.sh down PREFIX         delete every PREFIX-* namespace
#   netns_hosts.sh exec PREFIX PER CMD...  run CMD in host OMPI_COMM_WORLD_RANK / PER
#                                      (the wrapper mpirun starts, once per rank)
# PREFIX is sab<pid of the bench>: `up` deletes sab<pid>-* namespaces whose pid is gone.
# Exit 3 from `up`: `ip netns add` is not permitted here.
set -u
op=${1:-}
P=${2:-}
case "$P" in sab[0-9]*) ;; *) echo "netns_hosts.sh: prefix must be sab<pid>, not \"$P\"" >&2; exit 2 ;; esac

down() {
    local n
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$1-"); do ip netns del "$n" 2>/dev/null; done
}

case "$op" in
up)
    N=$3
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -o '^sab[0-9]*-' | sort -u); do
        pid=${n#sab}
        pid=${pid%-}
        [ -d "/proc/$pid" ] || down "sab$pid"
    done
    SW=$P-sw
    ip netns add "$SW" 2>/dev/null || exit 3
    set -e
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    ip -n "$SW" link set lo up
    ip -n "$SW" addr add 10.79.0.254/24 dev br0
    for ((i = 0; i < N; i++)); do
        H=$P-h$i
        ip netns add "$H"
        ip -n "$H" link set lo up
        ip link add "$P-v$i" netns "$H" type veth peer name "$P-s$i" netns "$SW"
        ip -n "$H" link set "$P-v$i" name eth0
        ip -n "$H" addr add "10.79.0.$((i + 1))/24" dev eth0
        ip -n "$H" link set eth0 up
        ip -n "$SW" link set "$P-s$i" master br0
        ip -n "$SW" link set "$P-s$i" up
    done
    set +e
    for ((i = 0; i < N; i++)); do
        for k in $(seq 1 25); do
            ip -n "$SW" -d link show "$P-s$i" | grep -q 'bridge_slave state forwarding' && break
            sleep 0.2
        done
    done
    ;;
rate)
    N=$3
    RATE=$4
    # token bucket: a burst of about 1 ms of the rate (at least 64 KiB, a full GSO packet),
    # up to 20 ms of queue
    case "$RATE" in
    *gbit) bps=$((${RATE%gbit} * 1000000000)) ;;
    *mbit) bps=$((${RATE%mbit} * 1000000)) ;;
    *) echo "netns_hosts.sh: rate must be Ngbit or Nmbit, not \"$RATE\"" >&2; exit 2 ;;
    esac
    burst=$((bps / 8 / 1000))
    [ $burst -ge 65536 ] || burst=65536
    for ((i = 0; i < N; i++)); do
        tc -n "$P-h$i" qdisc replace dev eth0 root tbf rate "$RATE" burst "$burst" latency 20ms || exit 1
        tc -n "$P-sw" qdisc replace dev "$P-s$i" root tbf rate "$RATE" burst "$burst" latency 20ms || exit 1
    done
    ;;
down)
    down "$P"
    ;;
exec)
    PER=$3
    shift 3
    r=${OMPI_COMM_WORLD_RANK:?netns_hosts.sh exec: OMPI_COMM_WORLD_RANK is not set (run it under mpirun)}
    exec ip netns exec "$P-h$((r / PER))" "$@"
    ;;
*)
    echo "usage: netns_hosts.sh up|rate|down|exec PREFIX ..." >&2
    exit 2
    ;;
esac
