#!/usr/bin/env bash
# call 3: issue 23's LoRA table (toy sides + PyTorch LoRA compile) and issue 21's table at 4096 and 8192, with 0088+0089
cd "$(dirname "$0")/../.."
S=scripts/gpu/cuda-session.sh
LORA_TORCH=compile-sdpa LORA_FULL_TORCH= OUT=$OUT/c3 timeout 300 bash $S info lora_table > $OUT/c3.log 2>&1
CONTEXTS="4096 8192" OUT=$OUT/c3s timeout 250 bash $S smollm_table >> $OUT/c3.log 2>&1
grep -E "NVIDIA|median|ratio|rc=|toy|torch|MiB|failed|Error" $OUT/c3.log | grep -v "WARNING\|^\s*$" | tail -40
