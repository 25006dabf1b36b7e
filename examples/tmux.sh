#!/usr/bin/env bash
# Start a run the way roger is meant to be used overnight: the watch owns the training in one
# tmux window, the critic grades it in another, and the ledger is there in the morning.
#   examples/tmux.sh roger.toml "python3 train.py --resume {ckpt}"
set -euo pipefail
config=${1:?usage: tmux.sh CONFIG "TRAIN COMMAND"}
train=${2:?usage: tmux.sh CONFIG "TRAIN COMMAND"}
session=roger-$(date +%m%d-%H%M)
tmux new-session -d -s "$session" -n watch "roger --config '$config' watch -- $train; read -r -p 'watch ended; enter to close'"
tmux new-window -t "$session" -n critic "roger --config '$config' critic --daemon"
tmux new-window -t "$session" -n ledger "watch -n 30 roger --config '$config' ledger tail -n 15"
echo "attach with: tmux attach -t $session"
