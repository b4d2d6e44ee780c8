# Device run: the pipeline end to end on the core example specs (offline policy, GPU backend).
# Usage on the GPU machine: source bench/device_setup.sh && bash bench/run_issue_specs.sh $OUT [BUDGET]
set -u
out=$1; spmm_budget=${2:-6}; spmv_budget=${3:-3}
rm -rf runs
for spec in spmm_fp32_1pct spmm_fp32_5pct spmm_fp16_1pct spmm_fp16_5pct spmv_fp32_uniform spmv_fp32_powerlaw; do
  start=$(date +%s)
  timeout 400 sparseditto run examples/$spec.yaml --budget "$([[ $spec == spmv* ]] && echo $spmv_budget || echo $spmm_budget)" --on-budget approve --runs-dir runs 2>&1 | tail -n 12
  echo "$spec took $(( $(date +%s) - start )) s"
done
python3 bench/summarize_runs.py runs "$out"
