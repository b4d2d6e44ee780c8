# Device runs for issues 14 and 15. On the GPU machine, from the repository root:
#   bash bench/issue14_device.sh kernels|spmv|spmm $OUT
# kernels: the GPU tests of the kernels not yet run on a GPU (merge path, 16-bit offsets, BSR on tensor cores, the 2:4
#   family's kernels), the fp8 contract test, the 2:4 baselines' test and probe, and the fused epilogue against
#   the unfused sequence, each also replayed from a CUDA graph (bench/sparse24_epilogue_graph.py).
# spmv: a subset of the matrix suite (evals/matrix_suite.py) written on the device, then `sparseditto eval --matrices`
#   SpMV fp32 at budget 3 (results.jsonl is appended per spec, so a cut-off run keeps what finished), with each
#   iteration's seconds (bench/iteration_seconds.py).
# spmm: the same for SpMM in DTYPES (default fp16,fp32) at NS (default 32,128) on the matrices named by NAMES
#   (default: four with dense blocks or shared columns); four specs per matrix at the defaults.
# check: the Hopper 2:4 kernel's GPU test alone (a hang must not cost the rest), its variants beside every baseline
#   at 4096^3 fp16 and 8192^3 bf16 (bench/explore_kernels.py), then the GPU tests named by TESTS (verbose, so that a
#   run cut off by its limit still says which passed).
# gpu: the GPU tests of the files named by FILES (required), selected by the -k expression TESTS, verbose (the whole
#   suite no longer fits one call).
# setup: only the installation above (for scripts run directly after it in the same call).
# spmmsweep: row-group SpMM variants (bench/explore_kernels.py, SPMM_SWEEP=SWEEP: 1, the default, the full grid; rows,
#   16-row groups beside 8) on the suite matrices named by NAMES at each N of NS and dtype of DTYPES.
# spmvsweep: every SpMV row-walk form (bench/explore_kernels.py, SPMV_SWEEP=1) on the suite matrices named by NAMES.
# ncu24: Nsight Compute's full set on the Hopper 2:4 kernel at 4096^3 fp16, with a digest of its sections.
# ncu8: the same on the e4m3 product at 8192^3, promoted every 2 instructions (the planner's start), its first launch
#   in bench/fp8_transpose_share.py.
# sp24: the sparse24 suite's specs named by ONLY (comma-separated ids) through `sparseditto eval run --only`, budget
#   BUDGET (default 2), cut off at EVAL_SECONDS.
# final: the 2:4 family's 4096^3 and decode specs through the pipeline (budget 2), then `spmv` on five matrices.
# fp8: the e4m3 Hopper sequence's GPU tests (its variants under the sanitizer, the reference-kernel test) and the fp8
#   baselines' test, then its variants beside every baseline (dense fp8 cuBLASLt, cuSPARSELt) at 8192^3
#   (bench/explore_kernels.py), then dense fp8 cuBLASLt's elements against the family's fp32-accumulation bound
#   (bench/fp8_accumulation.py).
set -u
what=$1; out=$2
# set up once per machine: several modes may run in one call
if [ ! -f /tmp/site/.ready ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
  touch /tmp/site/.ready
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c "import sparseditto.evals.matrix_suite" 2>/dev/null || python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
mkdir -p "$out"
mats=/tmp/issue14_matrices; mkdir -p $mats
# The runs an eval cut off at its time limit (state "interrupted" as `sparseditto runs` reads it: the process gone)
# ended from their last checkpoint, so that the iterations they finished get their report and result.json (session
# 11 lost a 16384^3 run's first iteration this way): `sparseditto resume ID --abort`.
end_cut_off_runs() {
  for id in $(python3 -c "import sys; from sparseditto.artifacts import list_runs
print(' '.join(r['run_id'] for r in list_runs(sys.argv[1]) if r['state'] == 'interrupted'))" "$1"); do
    timeout 120 sparseditto resume "$id" --abort --runs-dir "$1" 2>&1 | tail -n 3
  done
}
case $what in
  setup) ;;
  check)
    timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/tools/test_reference_kernels_gpu.py -k wgmma 2>&1 \
      | tee "$out/gpu_tests_wgmma_h200.txt" | tail -n 15
    SP24_TILED=0 timeout ${EXPLORE_SECONDS:-200} python3 bench/explore_kernels.py "$out" examples/sparse24_fp16_4096.yaml 2>&1 \
      | tee "$out/explore_sp24.txt" | tail -n 8
    mkdir -p "$out/bf16"; SP24_TILED=0 SP24_WGMMA=${BF16_VARIANTS:-2} timeout ${EXPLORE_SECONDS:-200} python3 bench/explore_kernels.py "$out/bf16" \
      examples/sparse24_bf16_8192.yaml 2>&1 | tee "$out/bf16/explore_sp24.txt" | tail -n 6
    [ "${TESTS_SECONDS:-260}" -gt 0 ] && timeout ${TESTS_SECONDS:-260} python3 -m pytest -v -m gpu -p no:cacheprovider --durations=15 \
      tests/tools/test_sparse24_baselines.py tests/tools/test_run_checks.py tests/tools/test_reference_kernels_gpu.py \
      -k "${TESTS:-not wgmma}" 2>&1 | tee "$out/gpu_tests_h200.txt" | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -n 40
    ;;
  gpu)  # the GPU tests of the files in FILES (the whole suite no longer fits one call) selected by TESTS, verbose
    # no default: a call without FILES once ran the whole suite for its full limit (session 10)
    [ -n "${FILES:-}" ] || { echo "gpu mode needs FILES (test files or folders)"; exit 2; }
    timeout ${TESTS_SECONDS:-540} python3 -m pytest -v -m gpu -p no:cacheprovider --durations=15 $FILES -k "${TESTS:-}" 2>&1 \
      | tee "$out/gpu_tests_h200.txt" | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -n 60
    ;;
  fp8)
    timeout ${TESTS_SECONDS:-240} python3 -m pytest -v -m gpu -p no:cacheprovider tests/families/test_sparse24_wgmma_gpu.py \
      tests/tools/test_reference_kernels_gpu.py -k "e4m3 and wgmma" 2>&1 | tee "$out/gpu_tests_fp8_h200.txt" \
      | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -n 10
    timeout 120 python3 -m pytest -v -m gpu -p no:cacheprovider tests/tools/test_sparse24_baselines.py -k fp8 2>&1 \
      | tee "$out/gpu_tests_baselines_fp8_h200.txt" | grep -E "FAILED|ERROR|passed|failed" | tail -n 8
    SP24_TILED=0 timeout ${EXPLORE_SECONDS:-240} python3 bench/explore_kernels.py "$out/fp8" examples/sparse24_fp8_8192.yaml 2>&1 \
      | tee "$out/explore_fp8.txt" | tail -n 8
    timeout ${ACCUM_SECONDS:-120} python3 bench/fp8_accumulation.py "$out/fp8_accumulation.json" 2>&1 | tee "$out/fp8_accumulation.txt"
    ;;
  ncu24)  # Nsight Compute's full set on the first launch of the Hopper 2:4 kernel (128 x 256 x 64, 4 stages) at 4096^3
    SP24_TILED=0 SP24_WGMMA=1 timeout ${NCU_SECONDS:-240} ncu --target-processes all -k regex:sp24_wgmma_sp -c 1 --set full \
      --import-source no -f -o "$out/sp24_wgmma" python3 bench/explore_kernels.py "$out/explore" examples/sparse24_fp16_4096.yaml 2>&1 | tail -n 4
    ncu --import "$out/sp24_wgmma.ncu-rep" --page details --csv > "$out/sp24_wgmma_details.csv" 2>&1
    ncu --import "$out/sp24_wgmma.ncu-rep" --page raw --csv > "$out/sp24_wgmma_raw.csv" 2>&1
    python3 bench/ncu_digest.py "$out/sp24_wgmma_details.csv" | tee "$out/sp24_wgmma_digest.txt" | head -n 60
    python3 bench/ncu_digest.py --raw "$out/sp24_wgmma_raw.csv" > "$out/sp24_wgmma_raw_metrics.txt"
    ;;
  ncu8)
    FP8_PROMOTE=2 timeout ${NCU_SECONDS:-300} ncu --target-processes all -k regex:sp24_wgmma_sp -c 1 --set full \
      --import-source no -f -o "$out/sp24_fp8" python3 bench/fp8_transpose_share.py "$out/fp8_transpose_share.json" 2>&1 | tail -n 4
    ncu --import "$out/sp24_fp8.ncu-rep" --page details --csv > "$out/sp24_fp8_details.csv" 2>&1
    python3 bench/ncu_digest.py "$out/sp24_fp8_details.csv" | tee "$out/sp24_fp8_digest.txt" | head -n 60
    ;;
  sp24)  # the 2:4 suite's specs named by ONLY through the pipeline, each side by side with every baseline (a new
    # results folder per call: a warm machine keeps the last one's)
    res=$(mktemp -d /tmp/eval_sp24.XXXX)
    timeout ${EVAL_SECONDS:-500} sparseditto eval run sparse24 --only ${ONLY:-sparse24_fp16_8192,sparse24_fp16_decode} \
      --budget ${BUDGET:-2} --out $res 2>&1 | tee "$out/eval_sp24_log.txt" | tail -n 20  # the whole log: session 11's cut-off run left no trace
    end_cut_off_runs $res/runs
    cp $res/results.jsonl "$out/eval_sp24_results.jsonl"; cp $res/report.md "$out/eval_sp24_report.md" 2>/dev/null
    tar -czf "$out/eval_sp24_runs.tgz" -C $res --exclude='*.cubin' --exclude='*.pkl' --exclude='checkpoints*' runs 2>/dev/null || true
    ;;
  final)
    for s in sparse24_fp16_4096 sparse24_fp16_decode; do
      timeout 150 sparseditto run examples/$s.yaml --budget 2 --on-budget approve --runs-dir /tmp/sp24 2>&1 | tail -n 4
    done
    for f in /tmp/sp24/*/report.md; do cp $f "$out/sp24_$(basename $(dirname $f))_report.md"; done
    tar -czf "$out/sp24_runs.tgz" -C /tmp/sp24 --exclude='*.cubin' --exclude='*.pkl' --exclude='checkpoints*' . 2>/dev/null
    NAMES=stencil2d_5pt_20m,circuit_5m,empty70_10m,powerlaw_dir_15m,road_perm_8m EVAL_SECONDS=${EVAL_SECONDS:-270} \
      bash bench/issue14_device.sh spmv "$out"
    ;;
  spmvsweep)  # bench/explore_kernels.py's SPMV_SWEEP variants on the suite matrices named by NAMES, fp32
    python3 -m sparseditto.evals.matrix_suite $mats --names ${NAMES:-web_3m,lp_wide_6m,powerlaw_dir_15m,small_l2_500k} 2>&1 | tail -n 1
    specs=""
    for name in $(echo ${NAMES:-web_3m,lp_wide_6m,powerlaw_dir_15m,small_l2_500k} | tr , ' '); do
      printf 'name: %s-spmv-fp32\noperation: spmv\ndtype: fp32\npattern: {kind: matrix_file, path: %s}\n' \
        $name $mats/$name.npz > /tmp/$name.yaml
      specs="$specs /tmp/$name.yaml"
    done
    SPMV_SWEEP=1 timeout ${EXPLORE_SECONDS:-240} python3 bench/explore_kernels.py "$out/sweep" $specs 2>&1 \
      | tee "$out/explore_spmv_sweep.txt" | grep -v "^  " | tail -n 8
    ;;
  spmmsweep)  # bench/explore_kernels.py's SPMM_SWEEP variants (row groups around the planner's start, beside row split)
    # on the suite matrices named by NAMES, at each N of NS and dtype of DTYPES
    python3 -m sparseditto.evals.matrix_suite $mats --names ${NAMES:-band_narrow_10m,fem3d_b4_8m} 2>&1 | tail -n 1
    specs=""
    for name in $(echo ${NAMES:-band_narrow_10m,fem3d_b4_8m} | tr , ' '); do
      for n in $(echo ${NS:-32,128} | tr , ' '); do
        for dt in $(echo ${DTYPES:-fp32} | tr , ' '); do
          printf 'name: %s-spmm-%s-n%s\noperation: spmm\ndtype: %s\nN: %s\npattern: {kind: matrix_file, path: %s}\n' \
            $name $dt $n $dt $n $mats/$name.npz > /tmp/$name-$dt-$n.yaml
          specs="$specs /tmp/$name-$dt-$n.yaml"
        done
      done
    done
    SPMM_SWEEP=${SWEEP:-1} timeout ${EXPLORE_SECONDS:-400} python3 bench/explore_kernels.py "$out/sweep" $specs 2>&1 \
      | tee "$out/explore_spmm_sweep.txt" | grep -v "^  " | tail -n 8
    ;;
  spmv|spmm)
    if [ $what = spmv ]; then
      names=${NAMES:-stencil2d_5pt_20m,stencil3d_7pt_10m,fem3d_b4_8m,powerlaw_dir_15m,road_perm_8m,circuit_5m,band_narrow_10m,lp_wide_6m,web_3m,empty70_10m,small_l2_500k,blockdiag_8_32_10m}
      args="--ops spmv --dtypes fp32"
    else
      names=${NAMES:-fem3d_b4_8m,blockdiag_8_32_10m,stencil2d_5pt_1m,band_narrow_10m}
      args="--ops spmm --n ${NS:-32,128} --dtypes ${DTYPES:-fp16,fp32}"
    fi
    # a folder per set of names: the eval takes every matrix in its folder (session 15 ran two more that an earlier
    # mode of the same call had written)
    set_dir=$mats/$what-$(echo "$names" | cksum | cut -d' ' -f1)
    python3 -m sparseditto.evals.matrix_suite $set_dir --names $names 2>&1 | tail -n 3
    # a new results folder per call: a warm machine keeps the last one's, and the eval refuses to add to it
    res=$(mktemp -d /tmp/eval_$what.XXXX)
    timeout ${EVAL_SECONDS:-470} sparseditto eval run --matrices $set_dir $args --budget 3 --out $res 2>&1 | tail -n 30
    end_cut_off_runs $res/runs
    cp $res/results.jsonl "$out/eval_${what}_results.jsonl"
    cp $res/report.md "$out/eval_${what}_report.md" 2>/dev/null
    python3 bench/iteration_seconds.py $res/runs > "$out/iteration_seconds.json" 2>/dev/null
    tar -czf "$out/eval_${what}_runs.tgz" -C $res --exclude='*.cubin' --exclude='*.pkl' --exclude='checkpoints*' runs 2>/dev/null || true
    ;;
esac
