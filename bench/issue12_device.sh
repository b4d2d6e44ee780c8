# Device run for issue 12 (the harness accepts no cheat). On the GPU machine, from the repository root:
#   bash bench/issue12_device.sh harness|kernels|tests $OUT
# harness: the adversarial suite, then the cost of verifying the reference kernels of two standard specs under
#   today's harness (.old_harness: `git archive` of the commit before this work, carried) and under this one.
# kernels: no false rejection (bench/no_false_rejection.py). tests: every GPU test but the adversarial suite's.
set -u
what=$1; out=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
tmp=/tmp/issue12; mkdir -p $tmp
case $what in
  harness)
    if [ -d .old_harness ]; then
      python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/old ./.old_harness >/dev/null 2>&1 || echo "old harness install failed"
      (cd .old_harness && PYTHONPATH=/tmp/old:/tmp/site python3 -c "import sparseditto, sys; print('old harness from', sparseditto.__file__)" &&
       PYTHONPATH=/tmp/old:/tmp/site python3 bench/verify_harness.py $tmp/old reference spmm_fp32_1pct spmv_fp32_powerlaw 2>&1 | tail -n 12)
      cp $tmp/old/harness_reference.json "$out/cost_old_harness.json"
    fi
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 bench/verify_harness.py $tmp/adv adversarial 2>&1 | tail -n 60
    cp $tmp/adv/harness_adversarial.json "$out/adversarial_h200.json"
    python3 bench/verify_harness.py $tmp/new reference spmm_fp32_1pct spmv_fp32_powerlaw 2>&1 | tail -n 12
    cp $tmp/new/harness_reference.json "$out/cost_new_harness.json"
    ;;
  kernels)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 bench/no_false_rejection.py "$out" 2>&1 | tail -n 30
    ;;
  tests)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests --deselect tests/evals/test_adversarial_suite.py 2>&1 \
      | tee "$out/gpu_tests_issue12_h200.txt" | tail -n 30
    ;;
esac
