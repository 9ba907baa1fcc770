#!/usr/bin/env bash
# Measures: the device check (graftlib/lab/run/device_check.py) on DEVICE (cuda): exactness (tiny models and the embedded
#   model), the verify cost curve 1..512 tokens, the host overhead, `graft prepare` on the embedded pair (on a GPU)
#   and a short bench of ar / dflash / ddtree / graft on gsm8k; sections start only within DC_MINUTES (8). QUICK=1:
#   the small variant (DEVICE=cpu QUICK=1 on a CPU). On an offline machine: gpu-remote.sh device-check.
# Takes: under 8 min on an H200; 1-3 min with DEVICE=cpu QUICK=1.
# Results: results/device-check-<device>/ (device-check.json, a table, the cost profile).
source "$(dirname "$0")/lib.sh"
QUICK=${QUICK:-}
graft device-check --device "${DEVICE:-cuda}" ${QUICK:+--quick} --minutes "${DC_MINUTES:-$([[ -n "$QUICK" ]] && echo 3 || echo 8)}"
