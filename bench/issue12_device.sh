# Device run for issue 12 (the harness accepts no cheat). On the GPU machine, from the repository root:
#   bash bench/issue12_device.sh harness|kernels|tests $OUT
# harness: the adversarial suite, then the cost of verifying the reference kernels of a standard spec under
#   this harness and under the one before this work (.old_harness: `git archive c3f459e`, carried).
# kernels: no false rejection (bench/no_false_rejection.py) and the runtime-layer tests.
# tests: every GPU test but the adversarial suite's.
set -u
what=$1; out=$2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
tmp=/tmp/issue12; mkdir -p $tmp
case $what in
  harness)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/tools/test_run_checks.py 2>&1 | tail -n 3
    python3 bench/verify_harness.py $tmp/adv adversarial 2>&1 | tail -n 75
    cp $tmp/adv/harness_adversarial.json "$out/adversarial_h200.json"
    python3 bench/verify_harness.py $tmp/new reference spmm_fp32_1pct 2>&1 | tail -n 5
    cp $tmp/new/harness_reference.json "$out/cost_new_harness.json"
    if [ -d .old_harness ]; then
      # the old tree as an importable package, by the same folder mapping as pyproject.toml (no install)
      mkdir -p /tmp/oldpkg/sparseditto && ln -sf "$PWD"/.old_harness/sparseditto/* /tmp/oldpkg/sparseditto/
      for d in agents graph tools knowledge_base evals; do ln -sfn "$PWD/.old_harness/$d" /tmp/oldpkg/sparseditto/$d; done
      (cd /tmp && PYTHONPATH=/tmp/oldpkg:/tmp/site python3 -c "import sparseditto.tools.runner as r; print('old harness from', r.__file__)")
      (cd .old_harness && PYTHONPATH=/tmp/oldpkg:/tmp/site python3 bench/verify_harness.py $tmp/old reference spmm_fp32_1pct 2>&1 | tail -n 5)
      cp $tmp/old/harness_reference.json "$out/cost_old_harness.json"
    fi
    ;;
  kernels)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 bench/no_false_rejection.py "$out" 2>&1 | tail -n 30
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/tools/test_runtime_layers_gpu.py 2>&1 | tail -n 8
    ;;
  tests)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || exit 1
    python3 -m pytest -q -m gpu -p no:cacheprovider tests --deselect tests/evals/test_adversarial_suite.py 2>&1 \
      | tee "$out/gpu_tests_issue12_h200.txt" | tail -n 30
    ;;
esac
