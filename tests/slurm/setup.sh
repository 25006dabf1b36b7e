#!/bin/bash
# A single-node SLURM on localhost for roger's tests: munged, slurmctld and slurmd from
# Debian's slurm-wlm + munge, proctrack/linuxproc, task/none. Root only; idempotent.
#   setup.sh start   configure (if needed) and start what is not running; prints
#                    "started: <daemons>" or "running"; "skipped: <why>" and exit 3 when it cannot
#   setup.sh stop    stop the daemons this script configured (never a slurm.conf it did not write)
# It only writes /etc/slurm/slurm.conf when there is none, or when the one there is its own
# (first line "# roger-test"), so a real cluster's config is never touched.
set -u
MARK="# roger-test: single-node SLURM for roger's tests (tests/slurm/setup.sh)"
CONF=/etc/slurm/slurm.conf
skip() { echo "skipped: $*"; exit 3; }

ours() { [ -f "$CONF" ] && [ "$(head -n1 "$CONF")" = "$MARK" ]; }

stop() {
    ours || { echo "not ours: nothing stopped"; exit 0; }
    for d in slurmd slurmctld; do
        if [ -f /run/$d.pid ]; then kill "$(cat /run/$d.pid)" 2>/dev/null; fi
    done
    # munged is left running: other things on a machine may use it, and it is harmless.
    for _ in $(seq 50); do
        pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
        sleep 0.1
    done
    echo "stopped"
}

start() {
    [ "$(id -u)" = 0 ] || skip "not root (starting slurmctld/slurmd needs root)"
    for b in munged slurmctld slurmd sbatch scontrol squeue sinfo; do
        command -v "$b" >/dev/null || skip "$b not found (apt-get install slurm-wlm munge)"
    done
    if [ -f "$CONF" ] && ! ours; then
        skip "$CONF exists and is not roger's test config: not touching a real cluster's setup"
    fi
    local host cpus started=""
    host=$(hostname -s)
    cpus=$(nproc)
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chmod 400 /etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    fi
    chown munge:munge /run/munge 2>/dev/null || true
    # One munged for both test clusters (setup2.sh takes the same lock).
    mkdir -p /run/lock
    exec 9>/run/lock/roger-test-munged.lock
    flock 9
    if ! pgrep -x munged >/dev/null; then
        # Not with the lock's descriptor: a daemon holding it would hold the lock forever.
        munged --force 9>&- || skip "munged would not start"
        started="$started munged"
    fi
    flock -u 9
    exec 9>&-
    cat > "$CONF.new" <<CONF
$MARK
ClusterName=rogertest
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
JobRequeue=1
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
KillWait=5
MinJobAge=600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=roger Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    if ! cmp -s "$CONF.new" "$CONF"; then
        mv "$CONF.new" "$CONF"
        # A changed config with daemons up: they read it again.
        pgrep -x slurmctld >/dev/null && scontrol reconfigure >/dev/null 2>&1
    else
        rm -f "$CONF.new"
    fi
    if ! pgrep -x slurmctld >/dev/null; then
        slurmctld || skip "slurmctld would not start (see /var/log/slurm/slurmctld.log)"
        started="$started slurmctld"
    fi
    if ! pgrep -x slurmd >/dev/null; then
        slurmd || skip "slurmd would not start (see /var/log/slurm/slurmd.log)"
        started="$started slurmd"
    fi
    local state=""
    for _ in $(seq 150); do
        state=$(sinfo -h -n "$host" -o %t 2>/dev/null | head -n1)
        case "$state" in
            idle*|mix*|alloc*) break ;;
            down*|drain*|drng*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 ;;
        esac
        sleep 0.2
    done
    case "$state" in
        idle*|mix*|alloc*) ;;
        *) skip "node $host did not come up (state '${state:-none}'; see /var/log/slurm/)" ;;
    esac
    if [ -n "$started" ]; then echo "started:$started"; else echo "running"; fi
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
