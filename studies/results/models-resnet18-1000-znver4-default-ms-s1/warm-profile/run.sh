#!/bin/bash
export TVM_NUM_THREADS=2 PYTHONPATH=/work/t2/src
cd /work/prof
date -u
/work/main/.venv/bin/python prof.py warm /work/t2/W/resnet18-shipped-winograd.db > warm.txt 2>&1
date -u
/work/main/.venv/bin/python prof.py cold /work/t2/W/resnet18-tensortune-winograd-channels-last-prepacked.db > cold.txt 2>&1
date -u
