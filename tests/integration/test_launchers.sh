#!/usr/bin/env bash
# sluice-train started by launchers that give each process a rank but no member list:
# 1. torchrun itself (torch.distributed.run --no_python, 2 processes on this host, where
#    Debian's python3-torch is installed; through torchrun_compat.py, which mends a crash of
#    torch 1.13's torchrun under Python 3.11): a ring of 2 with bit-identical replicas at every
#    step, and rank 0 says the world and where it came from;
# 2. MPICH / Intel MPI's Hydra environment (PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS,
#    MPI_LOCALRANKID), set the way mpiexec sets it: the same;
# 3. with strategy none under WORLD_SIZE=2 each process refuses to train alone;
# 4. on two network-namespace hosts, the pods of docs/guides/kubernetes.md: an Indexed Job whose
#    pods get RANK, WORLD_SIZE and MASTER_ADDR=sluice-0.sluice (a name only /etc/hosts of
#    the namespaces knows, as the headless Service's DNS would), and a Kubeflow TrainJob's
#    PET_* variables: the ranks meet at the master, train as a ring of 2 over TCP, and their
#    replicas are bit-identical. Where namespaces are not permitted that part is skipped.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
sl_require_tools sluice-train sluice-record
sl_require_fashion
sl_workdir launchers
sl_kill_on_exit KILL
PB=$(sl_port_base 28030) # blocks 28000..31999, offsets 30..33: see the port plan in lib.sh
sl_convert_fashion 2 1000
# 1000 records, the global batch 50 is 25 per replica: 20 steps in the epoch
sl_tiny_fashion_config "$T/tiny.sl" "shard auto" "epochs 1" "optimizer sgd lr=0.05 momentum=0.9" 'run_dir "runs/tiny"'
cd "$T" || exit 1
RING=(--set train.strategy=ring)
PY=${PYTHON:-/usr/bin/python3}

same_replicas() { # same_replicas NAME PREFIX: both hash logs complete and equal
    local n
    n=$(wc -l <"$2.0" 2>/dev/null || echo 0)
    [ "$n" = 21 ] || { fail "$1: $n hash lines from rank 0, expected 21 (steps 0..20)"; return; }
    if cmp -s "$2.0" "$2.1"; then ok "$1: replicas bit-identical at every step"; else
        fail "$1: hash logs differ"; diff "$2.0" "$2.1" | head -4
    fi
}

# 1. torchrun
if "$PY" -c "import torch.distributed.run" 2>/dev/null; then
    if run torchrun 0 "$PY" "$HERE/torchrun_compat.py" --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 \
        --master_port "$PB" --no_python "$BIN/sluice-train" tiny.sl "${RING[@]}" --run-dir run-tr --hash-log hash-tr; then
        same_replicas torchrun hash-tr
        want="cluster: 2 replicas (strategy ring), from torchrun (RANK, WORLD_SIZE, MASTER_ADDR)"
        grep -qF "$want" torchrun.out && ok "rank 0 says: $want" || { fail "no '$want' line"; head -5 torchrun.out; }
        n=$(grep -c 'cluster: ' torchrun.out)
        [ "$n" = 1 ] && ok "only rank 0 says it" || fail "$n cluster lines"
    fi
else
    echo "skipped part: torchrun (torch.distributed.run does not import)"
fi

# 2. Hydra's variables (mpiexec -n 2 on one host)
pids=()
for r in 0 1; do
    env PMI_RANK=$r PMI_SIZE=2 MPI_LOCALNRANKS=2 MPI_LOCALRANKID=$r PMI_FD=9 SLUICE_PORT_BASE=$((PB + 2)) \
        "$BIN/sluice-train" tiny.sl "${RING[@]}" --run-dir run-pmi --hash-log hash-pmi >"pmi$r.out" 2>"pmi$r.err" &
    pids+=($!)
done
rc0=0 rc1=0
wait "${pids[0]}" || rc0=$?
wait "${pids[1]}" || rc1=$?
if [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
    same_replicas pmi hash-pmi
    grep -qF "cluster: 2 replicas (strategy ring), from pmi (PMI_RANK, PMI_SIZE)" pmi0.out && ok "pmi: rank 0 names the source" ||
        fail "pmi: no cluster line: $(head -3 pmi0.out)"
    cmp -s hash-pmi.1 hash-tr.1 2>/dev/null && ok "pmi: the same parameters as under torchrun" ||
        { [ -f hash-tr.1 ] && fail "pmi and torchrun runs differ"; }
else
    fail "pmi: exits $rc0 $rc1: $(tail -3 pmi0.err pmi1.err)"
fi

# 3. strategy none under a launcher of 2: refused, naming the variable
if run alone 1 env RANK=0 WORLD_SIZE=2 "$BIN/sluice-train" tiny.sl --run-dir run-alone; then
    grep -q "one of 2 replicas (WORLD_SIZE, from torchrun) but the train block says strategy none" alone.err &&
        ok "strategy none under WORLD_SIZE=2 is refused" || fail "alone: $(cat alone.err)"
fi

# 4. two namespace hosts: the Indexed Job's pods, then the TrainJob's
if ! command -v ip >/dev/null || ! ip netns add "sll$$-sw" 2>/dev/null; then
    echo "skipped part: network namespaces not permitted"
    sl_finish
    exit 0
fi
NS=("sll$$-h0" "sll$$-h1")
SW="sll$$-sw"
cleanup_ns() {
    for n in "${NS[@]}" "$SW"; do ip netns del "$n" 2>/dev/null; rm -rf "/etc/netns/$n"; done
}
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; cleanup_ns; rm -rf "$T"' EXIT
ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up
for i in 0 1; do
    ip netns add "${NS[$i]}"
    ip -n "${NS[$i]}" link set lo up
    ip link add "sll$$v$i" netns "${NS[$i]}" type veth peer name "sll$$s$i" netns "$SW"
    ip -n "${NS[$i]}" link set "sll$$v$i" name eth0
    ip -n "${NS[$i]}" addr add "10.78.0.$((i + 1))/24" dev eth0
    ip -n "${NS[$i]}" link set eth0 up
    ip -n "$SW" link set "sll$$s$i" master br0
    ip -n "$SW" link set "sll$$s$i" up
    # the headless Service's names, as the cluster DNS would answer them
    mkdir -p "/etc/netns/${NS[$i]}"
    printf '127.0.0.1 localhost\n10.78.0.1 sluice-0.sluice\n10.78.0.2 sluice-1.sluice\n' >"/etc/netns/${NS[$i]}/hosts"
done
for i in 0 1; do
    for k in $(seq 1 20); do
        ip -n "$SW" -d link show "sll$$s$i" | grep -q 'bridge_slave state forwarding' && break
        sleep 0.2
    done
done

pod_pair() { # pod_pair NAME ENV-FOR-RANK-0... -- ENV-FOR-RANK-1...: sluice-train in each host
    local name=$1 e0=() e1=()
    shift
    while [ "$1" != "--" ]; do e0+=("$1"); shift; done
    shift
    e1=("$@")
    pids=()
    ip netns exec "${NS[0]}" env "${e0[@]}" "$BIN/sluice-train" tiny.sl --set train.strategy=ring \
        --run-dir "run-$name" --hash-log "hash-$name" >"${name}0.out" 2>"${name}0.err" &
    pids+=($!)
    ip netns exec "${NS[1]}" env "${e1[@]}" "$BIN/sluice-train" tiny.sl --set train.strategy=ring \
        --run-dir "run-$name-1" --hash-log "hash-$name" >"${name}1.out" 2>"${name}1.err" &
    pids+=($!)
    local r0=0 r1=0
    wait "${pids[0]}" || r0=$?
    wait "${pids[1]}" || r1=$?
    if [ $r0 != 0 ] || [ $r1 != 0 ]; then
        fail "$name: exits $r0 $r1"; tail -3 "${name}0.err" "${name}1.err"; return 1
    fi
    same_replicas "$name" "hash-$name"
    return 0
}

# the Indexed Job: RANK from the completion index, the master by its Service name
job=(WORLD_SIZE=2 MASTER_ADDR=sluice-0.sluice MASTER_PORT=29500 SLUICE_JOB_ID=5a1ce0000000beef)
if pod_pair indexed RANK=0 "${job[@]}" -- RANK=1 "${job[@]}"; then
    want="cluster: 2 replicas (strategy ring), from torchrun (RANK, WORLD_SIZE, MASTER_ADDR), addresses exchanged at the master"
    grep -qF "$want" indexed0.out && ok "indexed job: rank 0 says: $want" || fail "indexed job: $(head -3 indexed0.out)"
    grep -q 'KiB/step (tcp)' indexed0.out && ok "indexed job: the ring runs over TCP between the hosts" ||
        fail "indexed job: no '(tcp)' on the epoch line: $(grep epoch indexed0.out | head -2)"
fi
# the TrainJob's pods (one process per node, sluice-train as the command)
pet=(PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_MASTER_ADDR=sluice-0.sluice PET_MASTER_PORT=29400)
if pod_pair trainjob PET_NODE_RANK=0 "${pet[@]}" -- PET_NODE_RANK=1 "${pet[@]}"; then
    grep -qF "from kubeflow (PET_NODE_RANK, PET_NNODES, PET_MASTER_ADDR), addresses exchanged at the master" trainjob0.out &&
        ok "trainjob: rank 0 names the source" || fail "trainjob: $(head -3 trainjob0.out)"
    cmp -s hash-trainjob.0 hash-indexed.0 && ok "trainjob: the same parameters as the indexed job" ||
        fail "trainjob and indexed job differ"
fi
sl_finish
