# Device run for issue 12 (the harness accepts no cheat). On the GPU machine, from the repository root:
#   bash bench/issue12_device.sh harness|kernels|tests $OUT
# harness: the adversarial suite, no false rejection (bench/no_false_rejection.py), the runtime-layer tests and the
#   cost of verifying a standard spec's reference kernels.
# kernels: no false rejection and the runtime-layer tests alone.
# tests: every GPU test but the adversarial suite's.
# cost: a full verification (sanitizer and Nsight Compute included) of two standard specs' reference kernels by
#   the harness before issue 12 (commit c3f459e, carried as .old_harness/) and by this tree, one after the other.
set -u
what=$1; out=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
tmp=/tmp/issue12; mkdir -p $tmp
case $what in
  harness)
    # the adversarial suite and no-false-rejection side by side (their outcomes, not their times, are the
    # evidence), then the runtime-layer tests and the verification cost of a standard spec's kernels alone
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/tools/test_run_checks.py 2>&1 | tail -n 3
    timeout 330 python3 bench/no_false_rejection.py "$out" > $tmp/nfr.log 2>&1 &
    timeout 500 python3 bench/verify_harness.py $tmp/adv adversarial 2>&1 | tail -n 70
    cp $tmp/adv/harness_adversarial.json "$out/adversarial_h200.json"
    wait; tail -n 12 $tmp/nfr.log
    timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/tools/test_runtime_layers_gpu.py 2>&1 | tail -n 4
    timeout 80 python3 bench/verify_harness.py $tmp/new reference spmm_fp32_1pct 2>&1 | tail -n 3
    cp $tmp/new/harness_reference.json "$out/cost_new_harness.json"
    ;;
  cost)
    # each side is its own package tree of symlinks, run from /tmp with nothing installed, so that neither side
    # (nor the runner's child processes, which inherit PYTHONPATH and the working directory) can import the other
    for side in old new; do
      src=$PWD; [ $side = old ] && src=$PWD/.old_harness
      pkg=/tmp/pkg_$side/sparseditto; mkdir -p $pkg
      for f in $src/sparseditto/*.py; do ln -sf $f $pkg/; done
      for d in agents graph tools knowledge_base evals; do ln -sfn $src/$d $pkg/$d; done
    done
    for spec in spmm_fp32_1pct spmv_fp32_powerlaw; do
      for side in old new; do
        src=$PWD; [ $side = old ] && src=$PWD/.old_harness
        (cd /tmp && PYTHONPATH=/tmp/pkg_$side:/tmp/site timeout 280 python3 $src/bench/verify_harness.py \
          $tmp/$side-$spec reference $spec 2>&1 | tail -n 3)
        cp $tmp/$side-$spec/harness_reference.json "$out/cost_${side}_$spec.json"
      done
    done
    ;;
  tests)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests --deselect tests/evals/test_adversarial_suite.py 2>&1 \
      | tee "$out/gpu_tests_issue12_h200.txt" | tail -n 30
    ;;
esac
