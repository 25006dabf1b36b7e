#!/bin/sh
# Seed fuzz/corpus/<target>/ with the repository's real samples, so libFuzzer starts from
# inputs that get past each parser. Run from anywhere; existing corpus files are kept.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fx="$root/tests/fixtures"
seed() { # target file...
    t=$1
    shift
    mkdir -p "$here/corpus/$t"
    for f in "$@"; do
        if [ -f "$f" ]; then
            cp "$f" "$here/corpus/$t/$(echo "$f" | sed "s|^$root/||; s|/|_|g")"
        fi
    done
}
seed config "$root/roger.example.toml" "$fx"/critic_v0/base.toml
seed jsonl "$root/examples/train_log.jsonl" "$fx/resumed_lr_restart.jsonl"
seed log_tail "$root/examples/train_log.jsonl"
seed csv "$fx/lightning_metrics.csv"
seed text "$fx/nanogpt_train.log"
seed numbers_and_times "$fx/nanogpt_train.log"
seed hf_trainer_state "$fx/hf_whisper_trainer_state.json"
seed tensorboard "$fx"/tensorboard/*/events.out.tfevents.*
seed mlflow "$fx/mlflow/run/metrics/lr" "$fx/mlflow/run/metrics/train/loss"
seed ledger "$fx/critic_v0/ledger.jsonl"
seed ledger_append "$fx/critic_v0/ledger.jsonl"
seed mountinfo "$fx"/mountinfo/*.txt /proc/self/mountinfo
seed proc_stat /proc/self/stat /proc/1/stat
seed proc_io_meminfo_cmdline_version /proc/self/io /proc/meminfo /proc/self/cmdline /proc/version
seed cgroup_files /proc/self/cgroup /sys/fs/cgroup/cpu.stat /sys/fs/cgroup/io.stat
seed gpu_replay "$fx"/gpu/*.json
# No sample file in the repository for these four: one written here (as roger writes them).
put() { # target name content
    mkdir -p "$here/corpus/$1"
    printf '%s' "$3" > "$here/corpus/$1/$2"
}
put latest_json file.json '{
  "path": "ckpt-300.pt",
  "sha256": "f2c988d1ccdb8107b9988bc9df145f9bbac87c952c8bad53e1dd24402c7ffdc3",
  "size": 1130,
  "step": 300,
  "published_at": "2026-12-03T08:28:32.875Z"
}'
put queue_entry file.json '{"id":"01764757712875000000","source":"/runs/r/ck/ckpt-300.pt","target":"/data/ck/ckpt-300.pt","snapshot":"/data/ck/.roger-queue/01764757712875000000.snap/ckpt-300.pt","no_snapshot":null,"size":1130,"files":1,"step":300,"in_place":false,"queued_at":"2026-12-03T08:28:32.875Z","request":{"src":"/runs/r/ck/ckpt-300.pt","dest":"/data/ck","step":null,"run":"r","ledger":"/runs/r/roger-ledger.jsonl","retention":{"keep_last":3,"keep_every":1000},"margin":1073741824,"quarantine_dir":"/runs/r/.roger/quarantine","rollback_margin":200,"config":"/runs/r/roger.toml","queue":{"id":"01764757712875000000","queued_at":"2026-12-03T08:28:32.875Z","files":[{"rel":"","size":1130,"mtime":[1764757700,123456789]}]}}}'
put nvidia_smi h100.csv '0, NVIDIA H100 80GB HBM3, GPU-aaaa, 61234, 81559, 98, 71, 74, 689.52, 700.00, 1980, 1980, 0x0000000000000004, 0, 0
1, NVIDIA H100 80GB HBM3, GPU-bbbb, 5, 81559, 0, 0, 33, 70.10, 700.00, 345, 1980, 0x0000000000000001, [N/A], [Not Supported]

4242, GPU-bbbb, 1024
77, GPU-aaaa, [N/A]
'
put kernel_log_xids dmesg.txt '[  812.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.
[  900.000001] NVRM: Xid (PCI:0000:af:00): 13, pid=4242, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1)
'
echo "seeded $(find "$here/corpus" -type f | wc -l) files under $here/corpus"
