#!/bin/bash
# A private two-node SLURM on this one host for roger's multi-node test: two slurmd
# (-N node1, -N node2) on their own ports beside a slurmctld, all with a config of their own
# under BASE (never /etc/slurm), from Debian's slurm-wlm, which is built with
# --enable-multiple-slurmd (`scontrol show config` says MULTIPLE_SLURMD = Yes; %n is expanded
# in the Slurmd* paths). Root only. Every slurm command needs SLURM_CONF=BASE/slurm.conf.
#   setup2.sh start BASE   start it; "started" (exit 0), or "skipped: <why>" and exit 3
#   setup2.sh stop BASE    stop the slurm daemons start started (munged is left running, as
#                          setup.sh leaves it: the single-node test may be using it)
set -u
BASE=${2:?usage: setup2.sh start|stop BASE}
CONF=$BASE/slurm.conf
export SLURM_CONF=$CONF
skip() { echo "skipped: $*"; exit 3; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop() {
    for pf in "$BASE"/run/slurmd.node1.pid "$BASE"/run/slurmd.node2.pid "$BASE"/run/slurmctld.pid; do
        if alive "$pf"; then kill "$(cat "$pf")" 2>/dev/null; fi
    done
    for _ in $(seq 50); do
        alive "$BASE/run/slurmctld.pid" || alive "$BASE/run/slurmd.node1.pid" \
            || alive "$BASE/run/slurmd.node2.pid" || break
        sleep 0.1
    done
    echo "stopped"
}

start() {
    [ "$(id -u)" = 0 ] || skip "not root (starting slurmctld/slurmd needs root)"
    for b in munged munge unmunge slurmctld slurmd sbatch srun scontrol sinfo; do
        command -v "$b" >/dev/null || skip "$b not found (apt-get install slurm-wlm munge)"
    done
    mkdir -p "$BASE"/{state,run,log,spool/node1,spool/node2}
    cat > "$CONF" <<CONF
ClusterName=rogertwo
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=300
SlurmdTimeout=60
StateSaveLocation=$BASE/state
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdSpoolDir=$BASE/spool/%n
SlurmdPidFile=$BASE/run/slurmd.%n.pid
SlurmdLogFile=$BASE/log/slurmd.%n.log
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001 CPUs=1 State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17002 CPUs=1 State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    # One munged for both test clusters: started under the lock setup.sh takes too.
    mkdir -p /run/lock
    (
        flock 9
        if ! pgrep -x munged >/dev/null; then
            if [ ! -s /etc/munge/munge.key ]; then
                mkdir -p /etc/munge
                dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
                chmod 400 /etc/munge/munge.key
                chown munge:munge /etc/munge/munge.key 2>/dev/null || true
            fi
            mkdir -p /run/munge
            # Not with the lock's descriptor: a daemon holding it would hold the lock forever.
            munged --force 9>&- 2>/dev/null || exit 3
        fi
    ) 9>/run/lock/roger-test-munged.lock || skip "munged would not start"
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n | unmunge >/dev/null 2>&1 || skip "munge does not work"
    alive "$BASE/run/slurmctld.pid" || slurmctld -f "$CONF" \
        || skip "slurmctld would not start (see $BASE/log/slurmctld.log)"
    for n in node1 node2; do
        alive "$BASE/run/slurmd.$n.pid" || slurmd -f "$CONF" -N "$n" \
            || skip "slurmd $n would not start (see $BASE/log/slurmd.$n.log)"
    done
    scontrol show config 2>/dev/null | grep -q "MULTIPLE_SLURMD *= *Yes" \
        || skip "this slurm-wlm build runs one slurmd per host (no MULTIPLE_SLURMD)"
    for _ in $(seq 150); do
        up=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -cE ' (idle|mix|alloc)')
        [ "$up" = 2 ] && { echo "started"; return; }
        sinfo -h -N -o '%N %t' 2>/dev/null | while read -r n s; do
            case "$s" in down*|drain*) scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 ;; esac
        done
        sleep 0.2
    done
    skip "the two nodes did not come up: $(sinfo -N 2>&1 | tr '\n' ' ')"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop BASE" >&2; exit 2 ;;
esac
